package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
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
// "bronze.<source>.<schema>.<table>", as an aligned table or JSON lines.
func Show(ctx context.Context, warehouse string, catalog config.Secret, name string, limit int, format string, out io.Writer) error {
	cat, err := OpenCatalogReadOnly(ctx, warehouse, catalog)
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
	var tw *tabwriter.Writer
	enc := json.NewEncoder(out)
	if format != "json" {
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		defer tw.Flush()
		fields := tbl.ArrowSchema().Fields()
		names := make([]string, len(fields))
		for i, f := range fields {
			names[i] = f.Name
		}
		fmt.Fprintln(tw, strings.Join(names, "\t"))
	}
	n := 0
	err = tbl.Scan(ctx, func(rec arrow.RecordBatch) error {
		cols := rec.Columns()
		for r := 0; r < int(rec.NumRows()); r++ {
			if limit > 0 && n >= limit {
				return errShowDone
			}
			if tw != nil {
				vals := make([]string, len(cols))
				for c, col := range cols {
					vals[c] = cellString(col, r)
				}
				fmt.Fprintln(tw, strings.Join(vals, "\t"))
			} else {
				row := map[string]any{}
				for c, col := range cols {
					row[rec.ColumnName(c)] = col.GetOneForMarshal(r)
				}
				if err := enc.Encode(row); err != nil {
					return err
				}
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
