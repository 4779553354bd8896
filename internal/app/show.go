package app

import (
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
	"github.com/tidemark/tidemark/internal/source/postgres"
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
// limit changes. The table format prints cdc_source_lsn also as
// PostgreSQL's X/Y, the notation of tidemark status and the logs.
func Show(ctx context.Context, warehouse string, catalog config.Secret, name string, limit int, format string, out io.Writer) error {
	cat, err := OpenCatalog(ctx, warehouse, catalog)
	if err != nil {
		return err
	}
	defer cat.Close()
	ident, ok := splitLakeName(name)
	if !ok || len(ident) < 2 {
		return fault.With(fault.ErrBadConfig, fmt.Sprintf("table %q: give the full name, e.g. bronze.shop.public.orders "+
			`(a level may be double-quoted, "" being a quote: silver.shop."My Schema"."Order""s")`, name), nil)
	}
	tbl, err := cat.LoadTable(ctx, ident)
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
	var tw *tabwriter.Writer
	enc := json.NewEncoder(out)
	if format != "json" {
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		defer tw.Flush()
		names := make([]string, len(fields))
		for i, f := range fields {
			names[i] = f.Name
			if i == lsnCol {
				names[i] += " (pg_lsn)"
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
				// the stored integer, and PostgreSQL's notation (status, logs)
				vals[c] += " (" + postgres.FormatLSN(uint64(col.(*array.Int64).Value(r))) + ")"
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
	if ident[0] == "bronze" && lsnCol >= 0 && seqCol >= 0 {
		first := &firstRows{limit: limit}
		err = tbl.Scan(ctx, func(rec arrow.RecordBatch) error {
			lsn, seq := rec.Column(lsnCol).(*array.Int64), rec.Column(seqCol).(*array.Int64)
			for r := 0; r < int(rec.NumRows()); r++ {
				first.add(lsn.Value(r), seq.Value(r), func() any { return render(rec, r) })
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

// positionedRow is a rendered row at source position (lsn, seq).
type positionedRow struct {
	lsn, seq int64
	row      any
}

func (a positionedRow) before(b positionedRow) bool {
	return a.lsn < b.lsn || a.lsn == b.lsn && a.seq < b.seq
}

// firstRows keeps the limit (0: all) rows of lowest position: a max-heap
// by position, so that memory follows the limit, not the table.
type firstRows struct {
	limit int
	rows  []positionedRow
}

func (f *firstRows) Len() int           { return len(f.rows) }
func (f *firstRows) Less(i, j int) bool { return f.rows[j].before(f.rows[i]) }
func (f *firstRows) Swap(i, j int)      { f.rows[i], f.rows[j] = f.rows[j], f.rows[i] }
func (f *firstRows) Push(x any)         { f.rows = append(f.rows, x.(positionedRow)) }
func (f *firstRows) Pop() any {
	last := f.rows[len(f.rows)-1]
	f.rows = f.rows[:len(f.rows)-1]
	return last
}

// add offers the row at (lsn, seq); render is called only if it is kept.
func (f *firstRows) add(lsn, seq int64, render func() any) {
	r := positionedRow{lsn: lsn, seq: seq}
	switch {
	case f.limit <= 0:
		r.row = render()
		f.rows = append(f.rows, r)
	case len(f.rows) < f.limit:
		r.row = render()
		heap.Push(f, r)
	case r.before(f.rows[0]):
		r.row = render()
		f.rows[0] = r
		heap.Fix(f, 0)
	}
}

// sorted returns the rows kept, by position.
func (f *firstRows) sorted() []positionedRow {
	out := slices.Clone(f.rows)
	slices.SortStableFunc(out, func(a, b positionedRow) int {
		switch {
		case a.before(b):
			return -1
		case b.before(a):
			return 1
		}
		return 0
	})
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
