package app

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
)

var errShowDone = errors.New("show: limit reached")

// splitLakeName splits a lake table name into its levels at the dots. A
// level that starts with '"' is quoted: it ends at the next lone '"', and
// "" inside it is a quote. Any other level is taken as written up to the
// next dot, quotes included (lake names are case-sensitive and never
// contain '.'). So the name status prints, silver.shop.My Schema.Orders,
// and silver.shop."My Schema"."Orders" both work. ok is false for an
// unterminated quote, text after a closing quote, or an empty level.
func splitLakeName(name string) (levels []string, ok bool) {
	for rest := name; ; {
		var level string
		if strings.HasPrefix(rest, `"`) {
			var b strings.Builder
			i, closed := 1, false
			for ; i < len(rest); i++ {
				if rest[i] != '"' {
					b.WriteByte(rest[i])
					continue
				}
				if i+1 < len(rest) && rest[i+1] == '"' {
					b.WriteByte('"')
					i++
					continue
				}
				closed = true
				break
			}
			if !closed {
				return nil, false
			}
			level, rest = b.String(), rest[i+1:]
			if rest != "" && rest[0] != '.' {
				return nil, false
			}
		} else {
			var more bool
			if level, rest, more = strings.Cut(rest, "."); more {
				rest = "." + rest
			}
		}
		if level == "" {
			return nil, false
		}
		levels = append(levels, level)
		if rest == "" {
			return levels, true
		}
		rest = rest[1:]
	}
}

// Show prints up to limit rows (0: all) of a lake table named
// "bronze.<source>.<schema>.<table>" (or silver..., or
// bronze.<source>._messages), as an aligned table or JSON lines. A bronze
// table's rows are printed by position (cdc_source_lsn, cdc_seq): the first
// limit changes; a silver table's by key. The table format prints cdc_source_lsn also as
// PostgreSQL's X/Y, the notation of tidemark status and the logs.
func Show(ctx context.Context, warehouse string, catalog config.Secret, name string, limit int, format string, out io.Writer) error {
	cat, err := OpenLakeReadOnly(ctx, warehouse, catalog)
	if err != nil {
		return err
	}
	defer cat.Close()
	ident, ok := splitLakeName(name)
	if !ok || len(ident) < 2 {
		return fault.With(fault.ErrBadConfig, fmt.Sprintf("table %q: give the full name, e.g. bronze.shop.public.orders "+
			`(a level may be double-quoted, "" being a quote: silver.shop."My Schema"."Order""s")`, name), nil)
	}
	tbl, err := cat.Open(ctx, ident)
	if err != nil {
		if errors.Is(err, lake.ErrNoSuchTable) {
			return fault.With(fault.ErrBadConfig, fmt.Sprintf("table %s does not exist in %s (tidemark status lists the tables)", name, warehouse), nil)
		}
		return err
	}
	fields := tbl.ArrowSchema().Fields()
	lsnCol, seqCol := -1, -1
	for i, f := range fields {
		switch f.Name {
		case bronze.ColLSN:
			lsnCol = i
		case bronze.ColSeq:
			seqCol = i
		}
	}
	// The position column is also shown in its source's notation; the
	// source's checkpoint names it (ident[1] is the pipeline for bronze and
	// silver alike).
	src := sourceNamed("")
	if cp, ok, err := bronze.LoadCheckpoint(ctx, cat, ident[1]); err == nil && ok {
		src = sourceNamed(cp.Info[pipeline.InfoSource])
	}
	var tw *tabwriter.Writer
	enc := json.NewEncoder(out)
	if format != "json" {
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		defer tw.Flush()
		names := make([]string, len(fields))
		for i, f := range fields {
			names[i] = f.Name
			if i == lsnCol {
				names[i] += " (" + src.posName + ")"
			}
		}
		fmt.Fprintln(tw, strings.Join(names, "\t"))
	}
	// render copies row r of rec out of the batch: a JSON object, or the
	// table's cells.
	render := func(rec arrow.RecordBatch, r int) any {
		cols := rec.Columns()
		if tw == nil {
			row := map[string]any{}
			for c, col := range cols {
				row[rec.ColumnName(c)] = col.GetOneForMarshal(r)
			}
			return row
		}
		vals := make([]string, len(cols))
		for c, col := range cols {
			vals[c] = cellString(col, r)
			if c == lsnCol && !col.IsNull(r) {
				// the stored integer, and the source's notation (status, logs)
				vals[c] += " (" + src.formatPos(uint64(col.(*array.Int64).Value(r))) + ")"
			}
		}
		return vals
	}
	emit := func(row any) error {
		if vals, ok := row.([]string); ok {
			_, err := fmt.Fprintln(tw, strings.Join(vals, "\t"))
			return err
		}
		return enc.Encode(row)
	}
	// A bronze table is a change log: print it in the order its changes
	// apply, (cdc_source_lsn, cdc_seq), the snapshot's r rows before the
	// changes made after them. (Files hold rows in commit order, and a
	// snapshot chunk commits after the changes streamed while it was read.)
	// A silver table is printed by key.
	var order []int
	switch {
	case ident[0] == "bronze" && lsnCol >= 0 && seqCol >= 0:
		order = []int{lsnCol, seqCol}
	case ident[0] == "silver":
		if key, err := silver.KeyOf(tbl); err == nil {
			for _, k := range key {
				for i, f := range fields {
					if f.Name == k {
						order = append(order, i)
					}
				}
			}
		}
	}
	if len(order) > 0 {
		first := &firstRows{limit: limit}
		err = tbl.Scan(ctx, func(rec arrow.RecordBatch) error {
			for r := 0; r < int(rec.NumRows()); r++ {
				key := make([]sortVal, len(order))
				for i, c := range order {
					key[i] = sortValOf(rec.Column(c), r)
				}
				first.add(key, func() any { return render(rec, r) })
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		for _, pr := range first.sorted() {
			if err := emit(pr.row); err != nil {
				return err
			}
		}
		return nil
	}
	n := 0
	err = tbl.Scan(ctx, func(rec arrow.RecordBatch) error {
		for r := 0; r < int(rec.NumRows()); r++ {
			if limit > 0 && n >= limit {
				return errShowDone
			}
			if err := emit(render(rec, r)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil && !errors.Is(err, errShowDone) {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}

// sortVal is one value of a row's sort key: NULL first, then numbers by
// value, other values by their text.
type sortVal struct {
	null, isNum bool
	num         float64
	n           int64
	text        string
}

func sortValOf(col arrow.Array, r int) sortVal {
	if col.IsNull(r) {
		return sortVal{null: true}
	}
	switch c := col.(type) {
	case *array.Int64:
		return sortVal{isNum: true, n: c.Value(r), num: float64(c.Value(r))}
	case *array.Int32:
		return sortVal{isNum: true, n: int64(c.Value(r)), num: float64(c.Value(r))}
	case *array.Int16:
		return sortVal{isNum: true, n: int64(c.Value(r)), num: float64(c.Value(r))}
	case *array.Float64:
		return sortVal{isNum: true, num: c.Value(r)}
	case *array.Float32:
		return sortVal{isNum: true, num: float64(c.Value(r))}
	}
	return sortVal{text: col.ValueStr(r)}
}

func (a sortVal) compare(b sortVal) int {
	switch {
	case a.null || b.null:
		return cmp.Compare(btoi(!a.null), btoi(!b.null))
	case a.isNum && b.isNum:
		if c := cmp.Compare(a.num, b.num); c != 0 {
			return c
		}
		return cmp.Compare(a.n, b.n) // int64s beyond float64's precision
	}
	return strings.Compare(a.text, b.text)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sortedRow is a rendered row and its sort key.
type sortedRow struct {
	key []sortVal
	row any
}

func (a sortedRow) compare(b sortedRow) int {
	for i := range a.key {
		if c := a.key[i].compare(b.key[i]); c != 0 {
			return c
		}
	}
	return 0
}

// firstRows keeps the limit (0: all) rows of lowest sort key: a max-heap,
// so that memory follows the limit, not the table.
type firstRows struct {
	limit int
	rows  []sortedRow
}

func (f *firstRows) Len() int           { return len(f.rows) }
func (f *firstRows) Less(i, j int) bool { return f.rows[i].compare(f.rows[j]) > 0 }
func (f *firstRows) Swap(i, j int)      { f.rows[i], f.rows[j] = f.rows[j], f.rows[i] }
func (f *firstRows) Push(x any)         { f.rows = append(f.rows, x.(sortedRow)) }
func (f *firstRows) Pop() any {
	last := f.rows[len(f.rows)-1]
	f.rows = f.rows[:len(f.rows)-1]
	return last
}

// add offers a row with sort key key; render is called only if it is kept.
func (f *firstRows) add(key []sortVal, render func() any) {
	r := sortedRow{key: key}
	switch {
	case f.limit <= 0:
		r.row = render()
		f.rows = append(f.rows, r)
	case len(f.rows) < f.limit:
		r.row = render()
		heap.Push(f, r)
	case r.compare(f.rows[0]) < 0:
		r.row = render()
		f.rows[0] = r
		heap.Fix(f, 0)
	}
}

// sorted returns the rows kept, by position.
func (f *firstRows) sorted() []sortedRow {
	out := slices.Clone(f.rows)
	slices.SortStableFunc(out, sortedRow.compare)
	return out
}

func cellString(col arrow.Array, r int) string {
	if col.IsNull(r) {
		return "NULL"
	}
	if d, ok := col.(*array.Decimal128); ok {
		return d.Value(r).ToString(d.DataType().(*arrow.Decimal128Type).Scale)
	}
	s := col.ValueStr(r)
	if _, ok := col.(*array.String); ok {
		s = strings.ReplaceAll(strings.ReplaceAll(s, "\t", `\t`), "\n", `\n`)
		if len(s) > 60 {
			s = s[:57] + "..."
		}
	}
	return s
}
