// Package bronzetest reads bronze tables back for tests and folds their
// change log into table states, the way a replica (or silver) would.
//
// Values are plain Go values so that tests can compare them with what they
// read from the source:
//
//	long, int, short       int64
//	float, double          float64
//	string                 string
//	binary, fixed, uuid    []byte
//	boolean                bool
//	timestamp(tz), date    time.Time (UTC; dates at midnight)
//	time                   time.Duration since midnight
//	decimal(p,s)           string, exact, with s digits after the point ("12.50")
//	list                   []any of the above
//	NULL                   nil
package bronzetest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/bronze"
	lakepkg "github.com/tidemark/tidemark/internal/lake"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
)

// Row is one bronze row: column name -> value (see the package comment).
type Row map[string]any

// LSN returns the row's cdc_source_lsn (0 if missing).
func (r Row) LSN() int64 { v, _ := r[bronze.ColLSN].(int64); return v }

// Seq returns the row's cdc_seq (0 if missing).
func (r Row) Seq() int64 { v, _ := r[bronze.ColSeq].(int64); return v }

// Op returns the row's cdc_op.
func (r Row) Op() string { v, _ := r[bronze.ColOp].(string); return v }

// Unchanged returns the row's cdc_unchanged column names.
func (r Row) Unchanged() []string {
	l, _ := r[bronze.ColUnchanged].([]any)
	out := make([]string, 0, len(l))
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// Pos renders the row's position as "lsn:seq" (for messages).
func (r Row) Pos() string { return fmt.Sprintf("%d:%d", r.LSN(), r.Seq()) }

// Read opens the SQLite catalog of warehouse, loads the table ident
// (e.g. "bronze", "shop", "public", "orders") and returns every live row of
// its current snapshot, in no particular order.
func Read(t testing.TB, warehouse string, ident ...string) []Row {
	t.Helper()
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: warehouse})
	if err != nil {
		t.Fatalf("bronzetest: open the lake at %s: %v", warehouse, err)
	}
	defer cat.Close()
	tbl, err := cat.LoadTable(ctx, ident)
	if err != nil {
		t.Fatalf("bronzetest: load %s: %v", strings.Join(ident, "."), err)
	}
	rows, err := ReadTable(ctx, tbl)
	if err != nil {
		t.Fatalf("bronzetest: %v", err)
	}
	return rows
}

// ReadTable returns every live row of tbl's current snapshot, whatever
// its format.
func ReadTable(ctx context.Context, tbl lakepkg.Table) ([]Row, error) {
	var out []Row
	err := tbl.Scan(ctx, func(rec arrow.RecordBatch) error {
		cols := rec.Columns()
		names := make([]string, len(cols))
		for c := range cols {
			names[c] = rec.ColumnName(c)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			r := make(Row, len(cols))
			for c, col := range cols {
				v, err := Value(col, i)
				if err != nil {
					return fmt.Errorf("column %q row %d: %w", names[c], i, err)
				}
				r[names[c]] = v
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// Value converts element i of an Arrow array to the Go value listed in the
// package comment.
func Value(a arrow.Array, i int) (any, error) {
	if a.IsNull(i) {
		return nil, nil
	}
	switch x := a.(type) {
	case *array.Int8:
		return int64(x.Value(i)), nil
	case *array.Int16:
		return int64(x.Value(i)), nil
	case *array.Int32:
		return int64(x.Value(i)), nil
	case *array.Int64:
		return x.Value(i), nil
	case *array.Uint32:
		return int64(x.Value(i)), nil
	case *array.Float32:
		return float64(x.Value(i)), nil
	case *array.Float64:
		return x.Value(i), nil
	case *array.Boolean:
		return x.Value(i), nil
	case *array.String:
		return x.Value(i), nil
	case *array.LargeString:
		return x.Value(i), nil
	case *array.StringView:
		return x.Value(i), nil
	case *array.Binary:
		return append([]byte(nil), x.Value(i)...), nil
	case *array.LargeBinary:
		return append([]byte(nil), x.Value(i)...), nil
	case *array.BinaryView:
		return append([]byte(nil), x.Value(i)...), nil
	case *array.FixedSizeBinary:
		return append([]byte(nil), x.Value(i)...), nil
	case *array.Timestamp:
		unit := x.DataType().(*arrow.TimestampType).Unit
		return x.Value(i).ToTime(unit).UTC(), nil
	case *array.Date32:
		return x.Value(i).ToTime().UTC(), nil
	case *array.Date64:
		return x.Value(i).ToTime().UTC(), nil
	case *array.Time64:
		unit := x.DataType().(*arrow.Time64Type).Unit
		return time.Duration(int64(x.Value(i)) * int64(unit.Multiplier())), nil
	case *array.Time32:
		unit := x.DataType().(*arrow.Time32Type).Unit
		return time.Duration(int64(x.Value(i)) * int64(unit.Multiplier())), nil
	case *array.Decimal128:
		scale := x.DataType().(*arrow.Decimal128Type).Scale
		return x.Value(i).ToString(scale), nil
	case *array.List:
		start, end := x.ValueOffsets(i)
		return listValues(x.ListValues(), start, end)
	case *array.LargeList:
		start, end := x.ValueOffsets(i)
		return listValues(x.ListValues(), start, end)
	case array.ExtensionArray:
		return Value(x.Storage(), i)
	}
	return nil, fmt.Errorf("bronzetest: no conversion for Arrow type %s", a.DataType())
}

func listValues(vals arrow.Array, start, end int64) ([]any, error) {
	out := make([]any, 0, end-start)
	for j := start; j < end; j++ {
		v, err := Value(vals, int(j))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Sort orders rows by (cdc_source_lsn, cdc_seq), the order in which a
// replica applies them (ARCHITECTURE §1.4). Equal positions keep their
// relative order.
func Sort(rows []Row) {
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.LSN() != b.LSN() {
			return a.LSN() < b.LSN()
		}
		return a.Seq() < b.Seq()
	})
}

// Duplicates describes every (cdc_source_lsn, cdc_seq) pair that appears
// more than once in rows: "no change appears twice" means it returns nothing.
func Duplicates(rows []Row) []string {
	type pos struct{ lsn, seq int64 }
	seen := map[pos][]Row{}
	var order []pos
	for _, r := range rows {
		p := pos{r.LSN(), r.Seq()}
		if _, ok := seen[p]; !ok {
			order = append(order, p)
		}
		seen[p] = append(seen[p], r)
	}
	var out []string
	for _, p := range order {
		rs := seen[p]
		if len(rs) < 2 {
			continue
		}
		ops := make([]string, len(rs))
		for i, r := range rs {
			ops[i] = r.Op()
		}
		out = append(out, fmt.Sprintf("position %d:%d appears %d times (ops %s, tx %v)",
			p.lsn, p.seq, len(rs), strings.Join(ops, ","), rs[0][bronze.ColTxID]))
	}
	return out
}

// IsMeta reports whether a column is one of bronze's cdc_* columns.
func IsMeta(col string) bool { return strings.HasPrefix(col, "cdc_") }

// KeyOf renders the values of the key columns of r joined by "|", the map
// key used by Replay.
func KeyOf(r Row, key []string) string {
	parts := make([]string, len(key))
	for i, k := range key {
		parts[i] = fmt.Sprint(r[k])
	}
	return strings.Join(parts, "|")
}

// Replay folds the change log rows into the final state of each key, in
// (cdc_source_lsn, cdc_seq) order (rows are sorted first, in place):
//
//   - r, c, u set the key's row; a column named in cdc_unchanged keeps the
//     key's previous value;
//   - d deletes the key, t (truncate) deletes every key;
//   - a c with cdc_unchanged is the second half of a key change (an UPDATE
//     of the key that left TOAST columns unchanged is written as d of the
//     old key, c of the new one at the next cdc_seq, docs/bronze.md "Key
//     changes"): those columns take the values of the row the d at
//     (cdc_source_lsn, cdc_seq-1) removed.
//
// A column in cdc_unchanged of a key with no previous value cannot be
// filled. That is only harmless when a later full row of the key (r or c,
// or a d/t) supersedes it, as when an update of a pre-existing row is
// captured before the snapshot chunk that reads the row; Replay fails the
// test if such a hole survives into the final state, naming the key, the
// column and the change that left it.
//
// The returned rows hold only source columns (no cdc_*).
func Replay(t testing.TB, rows []Row, key []string) map[string]Row {
	t.Helper()
	state, holes := Fold(rows, key)
	for _, h := range holes {
		t.Error(h)
	}
	if len(holes) > 0 {
		t.FailNow()
	}
	return state
}

// Fold is Replay without the testing.TB: it returns the final state and a
// description of every value that could not be filled (the state then holds
// nil for it).
func Fold(rows []Row, key []string) (map[string]Row, []string) {
	Sort(rows)
	state := map[string]Row{}
	// missing[k][col] = position of the change that left col unfilled.
	missing := map[string]map[string]string{}
	// The row the last d removed, for the c of a key change right after it.
	type removal struct {
		lsn, seq int64
		row      Row
		missing  map[string]string
	}
	var removed removal
	for _, r := range rows {
		switch op := r.Op(); op {
		case "t":
			state = map[string]Row{}
			missing = map[string]map[string]string{}
		case "d":
			k := KeyOf(r, key)
			removed = removal{lsn: r.LSN(), seq: r.Seq(), row: state[k], missing: missing[k]}
			delete(state, k)
			delete(missing, k)
		case "r", "c", "u":
			k := KeyOf(r, key)
			prev, had := state[k]
			prevMissing := missing[k]
			if op == "c" && len(r.Unchanged()) > 0 {
				// A key change: the previous state is the old key's.
				prev, had, prevMissing = nil, false, nil
				if removed.lsn == r.LSN() && removed.seq == r.Seq()-1 && removed.row != nil {
					prev, had, prevMissing = removed.row, true, removed.missing
				}
			}
			next := Row{}
			for col, v := range r {
				if !IsMeta(col) {
					next[col] = v
				}
			}
			holes := map[string]string{}
			for _, col := range r.Unchanged() {
				if had {
					if pv, ok := prev[col]; ok {
						next[col] = pv
						if p, ok := prevMissing[col]; ok {
							holes[col] = p
						}
						continue
					}
				}
				holes[col] = fmt.Sprintf("%s %s", op, r.Pos())
			}
			state[k] = next
			if len(holes) > 0 {
				missing[k] = holes
			} else {
				delete(missing, k)
			}
		default:
			// Unknown ops are not silently folded: they surface as holes.
			k := KeyOf(r, key)
			if missing[k] == nil {
				missing[k] = map[string]string{}
			}
			missing[k][bronze.ColOp] = fmt.Sprintf("unknown op %q at %s", op, r.Pos())
		}
	}
	var out []string
	keys := make([]string, 0, len(missing))
	for k := range missing {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cols := make([]string, 0, len(missing[k]))
		for c := range missing[k] {
			cols = append(cols, c)
		}
		sort.Strings(cols)
		for _, c := range cols {
			out = append(out, fmt.Sprintf("key %s: column %q was left unchanged (TOAST) by change %s but no earlier change of the key holds its value, and nothing later replaces it",
				k, c, missing[k][c]))
		}
	}
	return state, out
}

// ApplyDefaults applies the documented rule for columns added with a
// default (docs/bronze.md, "Columns added with a default") to rows, the
// rows of bronze table ident: every row the bronze snapshot recorded in the
// column's tidemark.defaults entry holds was written before the column
// existed, and reads its default where it holds NULL.
func ApplyDefaults(t testing.TB, warehouse string, rows []Row, ident ...string) {
	t.Helper()
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: warehouse})
	if err != nil {
		t.Fatalf("bronzetest: open the lake at %s: %v", warehouse, err)
	}
	defer cat.Close()
	tbl, err := cat.LoadTable(ctx, ident)
	if err != nil {
		t.Fatalf("bronzetest: load %s: %v", strings.Join(ident, "."), err)
	}
	ApplyTableDefaults(t, tbl, rows)
}

// ApplyTableDefaults is ApplyDefaults on a bronze table of any format.
func ApplyTableDefaults(t testing.TB, tbl lakepkg.Table, rows []Row) {
	t.Helper()
	ctx := context.Background()
	ident := tbl.Ident()
	defs, err := bronze.Defaults(tbl.Properties())
	if err != nil {
		t.Fatalf("bronzetest: %s: %v", strings.Join(ident, "."), err)
	}
	for name, d := range defs {
		if d.Snapshot == lake.NoSnapshot {
			continue
		}
		f, ok := tbl.ArrowSchema().FieldsByName(name)
		if !ok || len(f) != 1 {
			t.Fatalf("bronzetest: %s records a default for column %q, which it does not have", strings.Join(ident, "."), name)
		}
		one, err := bronze.DefaultArray(memory.DefaultAllocator, f[0].Type, d)
		if err != nil {
			t.Fatalf("bronzetest: %s column %q: %v", strings.Join(ident, "."), name, err)
		}
		v, err := Value(one, 0)
		one.Release()
		if err != nil {
			t.Fatal(err)
		}
		before := map[string]bool{}
		err = tbl.ScanAppended(ctx, lake.NoSnapshot, d.Snapshot, func(rec arrow.RecordBatch) error {
			var lsns, seqs *array.Int64
			for c := range rec.Columns() {
				switch rec.ColumnName(c) {
				case bronze.ColLSN:
					lsns, _ = rec.Column(c).(*array.Int64)
				case bronze.ColSeq:
					seqs, _ = rec.Column(c).(*array.Int64)
				}
			}
			if lsns == nil || seqs == nil {
				return fmt.Errorf("no %s/%s columns", bronze.ColLSN, bronze.ColSeq)
			}
			for i := range lsns.Len() {
				before[fmt.Sprintf("%d:%d", lsns.Value(i), seqs.Value(i))] = true
			}
			return nil
		})
		if err != nil {
			t.Fatalf("bronzetest: %s: read the rows of snapshot %d: %v", strings.Join(ident, "."), d.Snapshot, err)
		}
		for _, r := range rows {
			if before[r.Pos()] && r[name] == nil {
				r[name] = v
			}
		}
	}
}
