package gold

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/silver"
)

// This file is the incremental refresh (mode incremental) of a query that
// decomposes (plan.go). The gold table's last commit records the silver
// snapshot S it was computed from and silver's bronze cursor B there; silver
// is now at S' with cursor B'. The keys changed in between are those of the
// bronze rows appended in (B, B'] (silver merged exactly those). The
// refresh reads only those keys' rows from silver as of S (their old
// versions) and as of S' (their new ones), runs the query over each, and
// combines, group by group, the previous gold rows (G), the new versions'
// result (N) and the old versions' (O): counts and sums are G + N - O,
// min and max are those of G and N, a group whose count(*) reaches 0 is
// gone. Where that arithmetic cannot tell the answer — a min or max whose
// extreme value was among the old versions, a sum that reaches 0 after
// non-null values left it (0 or NULL?) — the refresh is a full recompute.
// So is it when the history needed is gone or not simple: a truncate in the
// range, a re-snapshot (it replaces silver's rows, dropping keys no bronze
// row names), silver rebuilt or its columns changed, a snapshot expired, more
// keys changed than MaxChangedKeys.

// MaxChangedKeys bounds the keys an incremental refresh reads (and holds,
// to look them up in silver); beyond it the refresh recomputes in full.
var MaxChangedKeys = 200_000

// columnsHash is a short fingerprint of a table's columns (names and
// types): an incremental refresh needs the same columns at both snapshots.
func columnsHash(sc *arrow.Schema) string {
	h := sha256.New()
	for _, f := range sc.Fields() {
		fmt.Fprintf(h, "%s %s\n", f.Name, f.Type)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// incremental refreshes gold table s incrementally from silver table t
// (ref) as now records it. why says, when nothing was committed and err is
// nil, why a full recompute is needed instead.
func (r *Refresher) incremental(ctx context.Context, e *engine, s Spec, q string, cols []Column, p *plan,
	t lake.Table, ref TableRef, gold lake.KeyedTable, now Read, sqlHash string) (rows int64, changed int, why string, err error) {
	sum := gold.Summary()
	if sum[PropSQL] != sqlHash {
		return 0, 0, "the SQL changed", nil
	}
	var prev Read
	found := false
	for _, rd := range Reads(sum) {
		if rd.Table == now.Table {
			prev, found = rd, true
		}
	}
	switch {
	case !found:
		return 0, 0, "the last refresh read other tables", nil
	case prev.Bronze == 0 || prev.Columns == "":
		return 0, 0, "the last refresh did not record silver's bronze cursor", nil
	case prev.Columns != now.Columns:
		return 0, 0, fmt.Sprintf("the columns of %s changed", ref), nil
	case prev.Resnapshot != now.Resnapshot:
		return 0, 0, fmt.Sprintf("a re-snapshot replaced the rows of %s", ref), nil
	case prev.Filling || now.Filling:
		return 0, 0, fmt.Sprintf("%s is filling a new column's default into its older rows", ref), nil
	}
	ss, ok := t.(lake.SnapshotScanner)
	if !ok {
		return 0, 0, "the table format cannot read an earlier snapshot", nil
	}
	snap, err := t.Snapshot(prev.Snapshot)
	if errors.Is(err, lake.ErrSnapshotNotFound) {
		return 0, 0, fmt.Sprintf("snapshot %d of %s, which the last refresh read, is expired", prev.Snapshot, ref), nil
	} else if err != nil {
		return 0, 0, "", err
	}
	if snap.Props[silver.PropBronzeSnapshot] != strconv.FormatInt(prev.Bronze, 10) {
		return 0, 0, fmt.Sprintf("%s was rebuilt since the last refresh", ref), nil
	}
	var keyCols []string
	if err := json.Unmarshal([]byte(t.Properties()[bronze.PropKey]), &keyCols); err != nil || len(keyCols) == 0 {
		return 0, 0, fmt.Sprintf("%s records no key", ref), nil
	}
	sc := plain(t.ArrowSchema())
	if idx := sc.FieldIndices(keyCols[0]); len(idx) != 1 || !lookupType(sc.Field(idx[0]).Type) {
		return 0, 0, fmt.Sprintf("the first key column of %s is not an integer or a string", ref), nil
	}

	keysPath := filepath.Join(e.dir, "keys.parquet")
	vals, why, err := r.changedKeys(ctx, ref, keyCols, sc, prev.Bronze, now.Bronze, keysPath)
	if err != nil || why != "" {
		return 0, 0, why, err
	}
	// The changed keys' rows: old versions as of the last refresh's
	// snapshot, new ones as of now.
	f := keyFilter(keyCols[0], vals)
	oldPath, newPath := filepath.Join(e.dir, "old.parquet"), filepath.Join(e.dir, "new.parquet")
	err = copyRows(sc, oldPath, func(fn func(arrow.RecordBatch) error) error {
		if len(vals) == 0 {
			return nil
		}
		return ss.ScanSnapshotWhere(ctx, prev.Snapshot, f, fn)
	})
	if errors.Is(err, lake.ErrSnapshotNotFound) {
		return 0, 0, fmt.Sprintf("snapshot %d of %s, which the last refresh read, is gone (%v)", prev.Snapshot, ref, err), nil
	} else if err != nil {
		return 0, 0, "", fmt.Errorf("read %s as of snapshot %d: %w", ref, prev.Snapshot, err)
	}
	err = copyRows(sc, newPath, func(fn func(arrow.RecordBatch) error) error {
		if len(vals) == 0 {
			return nil
		}
		return t.ScanWhere(ctx, f, fn)
	})
	if err != nil {
		return 0, 0, "", fmt.Errorf("read %s: %w", ref, err)
	}
	goldPath := filepath.Join(e.dir, "gold.parquet")
	if err := copyRows(plain(gold.ArrowSchema()), goldPath, func(fn func(arrow.RecordBatch) error) error { return gold.Scan(ctx, fn) }); err != nil {
		return 0, 0, "", fmt.Errorf("read %s: %w", r.table(s), err)
	}

	casts := make([]string, len(cols))
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = ident(c.Name)
		casts[i] = "CAST(q." + ident(c.Name) + " AS " + c.Cast + ") AS " + ident(c.Name)
	}
	quoted := make([]string, len(keyCols))
	for i, k := range keyCols {
		quoted[i] = ident(k)
	}
	keysSQL := "(SELECT DISTINCT " + strings.Join(quoted, ", ") + " FROM read_parquet(" + literal(keysPath) + ")) AS k USING (" + strings.Join(quoted, ", ") + ")"
	view := "CREATE OR REPLACE VIEW silver." + ident(ref.Schema) + "." + ident(ref.Table) + " AS SELECT x.* FROM read_parquet(%s) AS x SEMI JOIN " + keysSQL
	stmts := []string{
		fmt.Sprintf(view, literal(oldPath)),
		"CREATE TEMP TABLE r_old AS SELECT " + strings.Join(casts, ", ") + " FROM (" + q + "\n) AS q",
		fmt.Sprintf(view, literal(newPath)),
		"CREATE TEMP TABLE r_new AS SELECT " + strings.Join(casts, ", ") + " FROM (" + q + "\n) AS q",
		"CREATE TEMP TABLE g AS SELECT " + strings.Join(casts, ", ") + " FROM read_parquet(" + literal(goldPath) + ") AS q",
		"CREATE TEMP TABLE u AS SELECT 1 AS _src, * FROM g UNION ALL SELECT 2, * FROM r_new UNION ALL SELECT 3, * FROM r_old",
		"CREATE TEMP TABLE c AS " + combineSQL(cols, p),
	}
	for _, st := range stmts {
		if _, err := e.conn.ExecContext(ctx, st); err != nil {
			return 0, 0, "", fmt.Errorf("combine the changes: %w", err)
		}
	}
	var redo bool
	if err := e.conn.QueryRowContext(ctx, "SELECT coalesce(bool_or(_redo), false) FROM c").Scan(&redo); err != nil {
		return 0, 0, "", fmt.Errorf("combine the changes: %w", err)
	}
	if redo {
		return 0, 0, "a group's min or max lost its extreme value, or its sum came back to 0 (0 or NULL?): only a recompute can tell", nil
	}
	rowsCol := ""
	for i, k := range p.Kinds {
		if k == aggRows {
			rowsCol = ident(cols[i].Name)
			break
		}
	}
	out := filepath.Join(e.dir, "result.parquet")
	final := make([]string, len(cols))
	for i, c := range cols {
		final[i] = "CAST(" + ident(c.Name) + " AS " + c.Cast + ") AS " + ident(c.Name)
	}
	if _, err := e.conn.ExecContext(ctx, "COPY (SELECT "+strings.Join(final, ", ")+" FROM c WHERE "+rowsCol+" > 0) TO "+literal(out)+" (FORMAT parquet)"); err != nil {
		return 0, 0, "", fmt.Errorf("combine the changes: %w", err)
	}
	recs, rows, err := readResult(ctx, out, gold.ArrowSchema(), r.opts.MemoryLimit)
	if err != nil {
		return 0, 0, "", err
	}
	defer func() {
		for _, b := range recs {
			b.Release()
		}
	}()
	props := commitProps([]Read{now}, sqlHash)
	props[PropMode], props[PropPlan] = ModeIncremental, ModeIncremental
	if err := gold.Merge(ctx, lake.And(), recs, props); err != nil {
		return 0, 0, "", err
	}
	return rows, len(vals), "", nil
}

// combineSQL groups u (the previous gold rows, _src 1; the query over the
// new versions, 2; over the old ones, 3) by the query's group columns into
// each aggregate's new value, and _redo: whether a group's value cannot be
// told without a recompute.
func combineSQL(cols []Column, p *plan) string {
	var sel, groups, redo []string
	for i, c := range cols {
		a := ident(c.Name)
		signed := "sum(CASE WHEN _src = 3 THEN -" + a + " ELSE " + a + " END)"
		switch p.Kinds[i] {
		case aggGroup:
			sel = append(sel, a)
			groups = append(groups, a)
		case aggRows, aggCount:
			sel = append(sel, signed+" AS "+a)
			redo = append(redo, "coalesce("+signed+" < 0, false)")
		case aggSum:
			sel = append(sel, signed+" AS "+a)
			redo = append(redo, "coalesce(count("+a+") FILTER (WHERE _src = 3) > 0 AND "+signed+" = 0, false)")
		case aggMin, aggMax:
			fn, cmp := "min", "<="
			if p.Kinds[i] == aggMax {
				fn, cmp = "max", ">="
			}
			of := func(src string) string { return fn + "(" + a + ") FILTER (WHERE _src " + src + ")" }
			sel = append(sel, of("<> 3")+" AS "+a)
			redo = append(redo, "coalesce("+of("= 3")+" IS NOT NULL AND ("+of("= 1")+" IS NULL OR "+of("= 3")+" "+cmp+" "+of("= 1")+"), false)")
		}
	}
	return "SELECT " + strings.Join(sel, ", ") + ", (" + strings.Join(redo, " OR ") + ") AS _redo FROM u GROUP BY " + strings.Join(groups, ", ")
}

// changedKeys writes the key columns of the bronze rows of ref appended in
// bronze snapshots (after, to] to the Parquet file path (with silver's
// columns sc when there is none), and returns the
// distinct values of the first key column. why is set (and nothing else
// meaningful) when the range holds a truncate, cannot be read, or changes
// more than MaxChangedKeys keys.
func (r *Refresher) changedKeys(ctx context.Context, ref TableRef, keyCols []string, sc *arrow.Schema, after, to int64, path string) (vals []any, why string, err error) {
	b, err := r.cat.Open(ctx, bronze.Ident(r.opts.Source, change.TableID{Schema: ref.Schema, Name: ref.Table}))
	if err != nil {
		return nil, fmt.Sprintf("bronze of %s cannot be opened (%v)", ref, err), nil
	}
	var w *pqarrow.FileWriter
	var ksc *arrow.Schema
	seen := map[any]bool{}
	errStop := errors.New("stop")
	scanErr := b.ScanAppended(ctx, after, to, func(rec arrow.RecordBatch) error {
		opIdx := rec.Schema().FieldIndices(bronze.ColOp)
		if len(opIdx) != 1 {
			why = "bronze rows without " + bronze.ColOp
			return errStop
		}
		ops := rec.Column(opIdx[0])
		for i := 0; i < int(rec.NumRows()); i++ {
			if s, ok := ops.(*array.String); ok && s.Value(i) == "t" {
				why = fmt.Sprintf("%s was truncated", ref)
				return errStop
			}
		}
		kcols := make([]arrow.Array, len(keyCols))
		for j, k := range keyCols {
			idx := rec.Schema().FieldIndices(k)
			if len(idx) != 1 {
				why = fmt.Sprintf("bronze of %s has no key column %s", ref, k)
				return errStop
			}
			kcols[j] = rec.Column(idx[0])
		}
		if w == nil {
			fs := make([]arrow.Field, len(keyCols))
			for j, k := range keyCols {
				fs[j] = arrow.Field{Name: k, Type: kcols[j].DataType(), Nullable: true}
			}
			ksc = arrow.NewSchema(fs, nil)
			var err error
			if w, err = writeParquet(path, ksc); err != nil {
				return err
			}
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			if v := lookupValue(kcols[0], i); v != nil && !seen[v] {
				seen[v] = true
				vals = append(vals, v)
			}
		}
		if len(vals) > MaxChangedKeys {
			why = fmt.Sprintf("more than %d keys of %s changed", MaxChangedKeys, ref)
			return errStop
		}
		kb := array.NewRecordBatch(ksc, kcols, rec.NumRows())
		defer kb.Release()
		return w.Write(kb)
	})
	if w != nil {
		if err := w.Close(); err != nil && scanErr == nil {
			scanErr = err
		}
	}
	if why != "" {
		return nil, why, nil
	}
	if scanErr != nil {
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
		return nil, fmt.Sprintf("the bronze rows of %s merged since the last refresh cannot be read (%v)", ref, scanErr), nil
	}
	if w == nil { // nothing changed: an empty key file, of silver's key types
		fs := make([]arrow.Field, len(keyCols))
		for j, k := range keyCols {
			typ := arrow.DataType(arrow.BinaryTypes.String)
			if idx := sc.FieldIndices(k); len(idx) == 1 {
				typ = sc.Field(idx[0]).Type
			}
			fs[j] = arrow.Field{Name: k, Type: typ, Nullable: true}
		}
		w, err := writeParquet(path, arrow.NewSchema(fs, nil))
		if err != nil {
			return nil, "", err
		}
		return nil, "", w.Close()
	}
	return vals, "", nil
}

// lookupType reports whether a key column of type t can be looked up with
// lake.In (lookupValue).
func lookupType(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.INT32, arrow.INT64, arrow.STRING, arrow.LARGE_STRING:
		return true
	}
	return false
}

// lookupValue returns the value of row i of a key column as lake.In takes
// it (nil: null or a type lookupType refuses).
func lookupValue(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch x := a.(type) {
	case *array.Int32:
		return int64(x.Value(i))
	case *array.Int64:
		return x.Value(i)
	case *array.String:
		return x.Value(i)
	case *array.LargeString:
		return x.Value(i)
	}
	return nil
}

// copyRows writes the batches scan yields, of schema sc (by position), to
// the Parquet file path.
func copyRows(sc *arrow.Schema, path string, scan func(fn func(arrow.RecordBatch) error) error) error {
	w, err := writeParquet(path, sc)
	if err != nil {
		return err
	}
	err = scan(func(rec arrow.RecordBatch) error {
		if rec.NumRows() == 0 {
			return nil
		}
		if int(rec.NumCols()) != sc.NumFields() {
			return fmt.Errorf("a batch of %d columns for a table of %d", rec.NumCols(), sc.NumFields())
		}
		b := array.NewRecordBatch(sc, rec.Columns(), rec.NumRows())
		defer b.Release()
		return w.Write(b)
	})
	return errors.Join(err, w.Close())
}

// keyFilter matches the rows whose column col holds one of vals (int64 or
// string values, lookupValue's). The bounds besides the list let a reader
// skip files by their statistics: Iceberg's evaluators, like Java's, do
// not prune on an IN of more than 200 values.
func keyFilter(col string, vals []any) *lake.Filter {
	if len(vals) == 0 {
		return lake.In(col, vals)
	}
	lo, hi := vals[0], vals[0]
	for _, v := range vals[1:] {
		switch x := v.(type) {
		case int64:
			lo, hi = min(lo.(int64), x), max(hi.(int64), x)
		case string:
			lo, hi = min(lo.(string), x), max(hi.(string), x)
		}
	}
	return lake.And(lake.AtLeast(col, lo), lake.Or(lake.Less(col, hi), lake.Equal(col, hi)), lake.In(col, vals))
}
