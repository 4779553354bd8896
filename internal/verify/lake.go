package verify

import (
	"context"
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// This file reads the lake: which silver tables exist, how far each holds
// the source, and its rows.

// The silver contract (docs/verify.md, ARCHITECTURE §2). verify depends on
// the contract, not on the merge's code; a test checks that the names agree
// with internal/silver.
const (
	silverLevel        = "silver"
	buildingLevel      = "_building" // silver.<source>._building.<schema>.<table>: not yet published
	propKey            = bronze.PropKey
	propPosition       = "tidemark.position"
	propBronzeSnapshot = "tidemark.bronze-snapshot"
	colLSN             = "cdc_source_lsn"
	colDeleted         = "cdc_deleted"
)

// TableName names a source table.
type TableName struct{ Schema, Table string }

func (t TableName) String() string { return t.Schema + "." + t.Table }

func silverIdent(source string, t TableName) []string {
	return []string{silverLevel, source, t.Schema, t.Table}
}

func buildingIdent(source string, t TableName) []string {
	return []string{silverLevel, source, buildingLevel, t.Schema, t.Table}
}

func bronzeIdent(source string, t TableName) []string {
	return append(bronze.Namespace(source, t.Schema), t.Table)
}

// listTables returns the source tables that have a silver table or a
// bronze table (captured, maybe not yet published), sorted.
func listTables(ctx context.Context, cat lake.Catalog, source string) ([]TableName, error) {
	seen := map[TableName]bool{}
	for _, level := range []string{silverLevel, "bronze"} {
		ids, err := cat.TablesUnder(ctx, []string{level, source})
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if id[2] != buildingLevel {
				seen[TableName{Schema: id[2], Table: id[3]}] = true
			}
		}
	}
	out := make([]TableName, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b TableName) int {
		if c := strings.Compare(a.Schema, b.Schema); c != 0 {
			return c
		}
		return strings.Compare(a.Table, b.Table)
	})
	return out, nil
}

// notPublishedReason says why a source table has no silver table yet.
func notPublishedReason(ctx context.Context, cat lake.Catalog, source string, t TableName) string {
	if _, err := cat.Open(ctx, buildingIdent(source, t)); err == nil {
		return "its silver table is being built: the merge has not yet caught up with the end of the initial snapshot"
	}
	b, err := cat.Open(ctx, bronzeIdent(source, t))
	if err != nil {
		if refused, rerr := bronze.Refused(ctx, cat, source); rerr == nil {
			for _, r := range refused {
				if r.Schema == t.Schema && r.Table == t.Table {
					return "the capture leaves the table out: " + r.Reason
				}
			}
		}
		return "the table has neither a silver nor a bronze table: is it captured (in the publication)?"
	}
	sum := b.Summary()
	if sum == nil {
		return "bronze has no commit yet"
	}
	sp, err := pipeline.ParseSnapshotState(sum[pipeline.PropSnapshot])
	if err != nil {
		return "bronze's snapshot progress is unreadable"
	}
	switch sp.Status {
	case "done", "skipped":
		return "the initial snapshot is complete; the next merge publishes the silver table"
	case "running":
		if sp.Estimate > 0 {
			return fmt.Sprintf("the initial snapshot is running (%d of about %d rows)", sp.Rows, sp.Estimate)
		}
		return fmt.Sprintf("the initial snapshot is running (%d rows so far)", sp.Rows)
	}
	return "the initial snapshot has not started"
}

// silverKey returns the key a silver table records (tidemark.key), nil if
// it records none.
func silverKey(t lake.Table) ([]string, error) {
	raw := t.Properties()[propKey]
	if raw == "" {
		return nil, nil
	}
	var key []string
	if err := json.Unmarshal([]byte(raw), &key); err != nil {
		return nil, fmt.Errorf("table property %s = %q is not a JSON list of column names", propKey, raw)
	}
	return key, nil
}

// coverage says how far a silver table holds the source.
type coverage struct {
	// Summary is the tidemark.position of silver's current snapshot.
	Summary uint64
	// Checkpoint is bronze's source-wide commit LSN, when silver has merged
	// through bronze's latest snapshot (so holds everything bronze holds);
	// 0 otherwise.
	Checkpoint uint64
	// BronzeCheckpoint is bronze's commit LSN whatever silver's state: how
	// far the capture has come.
	BronzeCheckpoint uint64
}

// Position is the source position (commit LSN) up to which the silver table
// holds every change.
func (c coverage) Position() uint64 { return max(c.Summary, c.Checkpoint) }

// loadCovered loads the silver table and says how far it holds the source.
//
// A quiet table's silver summary position stays where its last change left
// it: bronze commits a table only when it has rows, and silver only merges
// what bronze committed. But when silver has merged through bronze's latest
// snapshot, it holds every change bronze holds, and bronze holds every
// change up to the pipeline checkpoint (tidemark.commit-lsn of namespace
// bronze.<source>), which heartbeats move even on an idle source. The
// checkpoint is read first, so the bronze snapshot read after it holds
// everything up to it.
func loadCovered(ctx context.Context, cat lake.Catalog, source string, t TableName) (lake.Table, coverage, error) {
	var cov coverage
	cp, haveCP, err := bronze.LoadCheckpoint(ctx, cat, source)
	if err != nil {
		return nil, cov, err
	}
	var head int64 = lake.NoSnapshot
	b, berr := cat.Open(ctx, bronzeIdent(source, t))
	if berr == nil {
		if h, ok := b.CurrentSnapshot(); ok {
			head = h.ID
		}
	}
	s, err := cat.Open(ctx, silverIdent(source, t))
	if err != nil {
		return nil, cov, err
	}
	sum := s.Summary()
	if p := sum[propPosition]; p != "" {
		if cov.Summary, err = strconv.ParseUint(p, 10, 64); err != nil {
			return nil, cov, fmt.Errorf("silver table %s: unreadable %s %q", strings.Join(s.Ident(), "."), propPosition, p)
		}
	}
	if haveCP {
		cov.BronzeCheckpoint = cp.Pos
	}
	if !haveCP || berr != nil || head == lake.NoSnapshot {
		return s, cov, nil
	}
	cur, err := strconv.ParseInt(sum[propBronzeSnapshot], 10, 64)
	if err != nil {
		return s, cov, nil
	}
	if cur == head {
		cov.Checkpoint = cp.Pos
		return s, cov, nil
	}
	// Bronze may be ahead of silver's cursor by compactions only (replace
	// snapshots rewrite files, they add no change): silver then holds
	// every change bronze holds, as when cur == head.
	if hs, err := b.History(cur, head); err == nil && len(hs) > 0 {
		only := true
		for _, h := range hs {
			only = only && h.Operation == "replace"
		}
		if only {
			cov.Checkpoint = cp.Pos
			return s, cov, nil
		}
	}
	// Silver may have merged a bronze snapshot newer than the one loaded.
	if err := b.Refresh(ctx); err == nil {
		if _, err := b.History(head, cur); err == nil {
			cov.Checkpoint = cp.Pos
		}
	}
	return s, cov, nil
}

// lakeRow is one row of a silver record batch.
type lakeRow struct {
	rec arrow.RecordBatch
	i   int
	m   *batchMap
}

// batchMap locates the source's columns in a silver record batch.
type batchMap struct {
	cols    []int // per source column: index in the batch, -1 if silver lacks it (read as NULL)
	key     []int // per key column
	lsn     int
	deleted int
}

func newBatchMap(st *SourceTable, sc *arrow.Schema) *batchMap {
	idx := func(name string) int {
		if ix := sc.FieldIndices(name); len(ix) > 0 {
			return ix[0]
		}
		return -1
	}
	m := &batchMap{lsn: idx(colLSN), deleted: idx(colDeleted)}
	for _, c := range st.Cols {
		m.cols = append(m.cols, idx(c.Name))
	}
	for _, c := range st.Key {
		m.key = append(m.key, idx(c.Name))
	}
	return m
}

func (r lakeRow) at(ix int) (any, arrow.DataType) {
	if ix < 0 {
		return nil, arrow.Null
	}
	a := r.rec.Column(ix)
	return valueAt(a, r.i), a.DataType()
}

func (r lakeRow) appendKey(buf []byte) []byte {
	for _, ix := range r.m.key {
		buf = appendArrowField(buf, r.rec.Column(ix), r.i)
	}
	return buf
}

func (r lakeRow) appendRow(buf []byte) []byte {
	for _, ix := range r.m.cols {
		if ix < 0 {
			buf = append(buf, 'N')
			continue
		}
		buf = appendArrowField(buf, r.rec.Column(ix), r.i)
	}
	return buf
}

func (r lakeRow) values() ([]any, []arrow.DataType) {
	vals := make([]any, len(r.m.cols))
	types := make([]arrow.DataType, len(r.m.cols))
	for j, ix := range r.m.cols {
		vals[j], types[j] = r.at(ix)
	}
	return vals, types
}

func (r lakeRow) keyValues() []any {
	out := make([]any, len(r.m.key))
	for j, ix := range r.m.key {
		out[j], _ = r.at(ix)
	}
	return out
}

func (r lakeRow) lsn() int64 {
	if r.m.lsn < 0 {
		return -1
	}
	if a, ok := r.rec.Column(r.m.lsn).(*array.Int64); ok && a.IsValid(r.i) {
		return a.Value(r.i)
	}
	return -1
}

func (r lakeRow) deleted() bool {
	if r.m.deleted < 0 {
		return false
	}
	a, ok := r.rec.Column(r.m.deleted).(*array.Boolean)
	return ok && a.IsValid(r.i) && a.Value(r.i)
}

// scanLive calls fn with every live row of the silver table (soft-deleted
// rows are not live), optionally restricted by filter (which may be nil).
func scanLive(ctx context.Context, t lake.Table, filter *lake.Filter, st *SourceTable, fn func(lakeRow) error) error {
	var m *batchMap
	var sc *arrow.Schema
	return t.ScanWhere(ctx, filter, func(rec arrow.RecordBatch) error {
		if sc == nil || !rec.Schema().Equal(sc) {
			sc, m = rec.Schema(), newBatchMap(st, rec.Schema())
			for j, ix := range m.key {
				if ix < 0 {
					return fmt.Errorf("silver table %s has no key column %s", strings.Join(t.Ident(), "."), st.Key[j].Name)
				}
			}
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			r := lakeRow{rec: rec, i: i, m: m}
			if r.deleted() {
				continue
			}
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	})
}

// lakeChunks hashes every live silver row into its chunk.
func lakeChunks(ctx context.Context, t lake.Table, st *SourceTable, n int) (map[int]*ChunkSum, int64, error) {
	out := map[int]*ChunkSum{}
	var rows int64
	var kbuf, rbuf []byte
	err := scanLive(ctx, t, nil, st, func(r lakeRow) error {
		kbuf = r.appendKey(kbuf[:0])
		rbuf = r.appendRow(rbuf[:0])
		b := BucketOf(md5.Sum(kbuf), n)
		c := out[b]
		if c == nil {
			c = &ChunkSum{}
			out[b] = c
		}
		c.add(md5.Sum(rbuf))
		rows++
		return nil
	})
	return out, rows, err
}

// lakeEntry is what drilling keeps of a silver row.
type lakeEntry struct {
	keyVals []any
	row     Digest
	count   int // > 1: the key has several live rows
}

// lakeDrill collects the silver rows of the given chunks, by canonical key.
func lakeDrill(ctx context.Context, t lake.Table, st *SourceTable, n int, chunks map[int]bool) (map[string]*lakeEntry, error) {
	out := map[string]*lakeEntry{}
	var kbuf, rbuf []byte
	err := scanLive(ctx, t, nil, st, func(r lakeRow) error {
		kbuf = r.appendKey(kbuf[:0])
		if !chunks[BucketOf(md5.Sum(kbuf), n)] {
			return nil
		}
		rbuf = r.appendRow(rbuf[:0])
		if e := out[string(kbuf)]; e != nil {
			e.count++
			return nil
		}
		out[string(kbuf)] = &lakeEntry{keyVals: r.keyValues(), row: md5.Sum(rbuf), count: 1}
		return nil
	})
	return out, err
}

// lakeRowVals is a silver row read for comparison.
type lakeRowVals struct {
	vals  []any
	types []arrow.DataType
	lsn   int64
}

// lakeFetch reads the live silver rows of the given keys (canonical key ->
// key values), several per key if silver holds duplicates. The scan is
// filtered on the first key column so that Iceberg can skip the data files
// (and bucket partitions) that cannot hold the keys.
func lakeFetch(ctx context.Context, t lake.Table, st *SourceTable, keys map[string][]any) (map[string][]lakeRowVals, error) {
	out := map[string][]lakeRowVals{}
	if len(keys) == 0 {
		return out, nil
	}
	first := make([]any, 0, len(keys))
	seen := map[string]bool{}
	var buf []byte
	for _, kv := range keys {
		buf = AppendField(buf[:0], kv[0], st.Key[0].Arrow)
		if !seen[string(buf)] {
			seen[string(buf)] = true
			first = append(first, kv[0])
		}
	}
	collect := func(filter *lake.Filter) error {
		return scanLive(ctx, t, filter, st, func(r lakeRow) error {
			buf = r.appendKey(buf[:0])
			if _, ok := keys[string(buf)]; !ok {
				return nil
			}
			vals, types := r.values()
			out[string(buf)] = append(out[string(buf)], lakeRowVals{vals: vals, types: types, lsn: r.lsn()})
			return nil
		})
	}
	err := collect(lake.In(st.Key[0].Name, first))
	if err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		// A filter iceberg-go cannot evaluate for this column type: read it all.
		clear(out)
		err = collect(nil)
	}
	return out, err
}
