package silver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/lake"
)

// This file reads a merge's input: the bronze rows appended in the range,
// grouped by key, then the silver rows of the keys they touch.

// input is everything one merge step reads. Rows are referred to by their
// index in the concatenation of batches: bronze batches first, then silver.
type input struct {
	batches []arrow.RecordBatch
	offsets []int // global index of each batch's first row
	total   int   // rows in all batches
	nBronze int   // batches[:nBronze] are bronze
	bronze  int   // bronze rows

	key     []string // key columns
	srcCols []string // silver source columns, in table order
	colIdx  map[string]int

	keys  keyIndex  // the touched keys
	trunc *pos      // last truncate in the range
	dead  []deadRow // bronze rows that cannot be folded

	// chs are the changes read, until group gives each key its own; order
	// is the keys' indices in key order (group).
	chs     []change
	order   []int32
	grouped bool
	// keyChanges counts the inserts that left columns unchanged (the insert
	// halves of key changes; keyChanges has nothing to do without one).
	keyChangeInserts int

	// keyVals holds, per key column, the distinct values of the touched
	// keys, when filterVals is set (the merge reads silver rows back).
	keyVals    []map[any]any
	filterVals bool

	// extras are silver rows read back that no change touches (a composite
	// key's filter selects a superset); dups are silver rows that duplicate a
	// key's row (never written by tidemark: dropped by the next merge).
	extras []keyRef
	dups   int

	// live is the scan of silver that found the touched keys' rows when
	// silver deletes rows by position (merge-on-read): the merge deletes
	// exactly the rows it replaces. nil when silver is copy-on-write (the
	// merge deletes by key, see filter).
	live lake.LiveRows

	// txs, when set, collects the transactions read (observe.go).
	txs *txTimes
}

// keyRef is an input row and its encoded key.
type keyRef struct {
	key string
	ref int
}

// keyed is one touched key: its encoding, its changes in the range and its
// silver row.
type keyed struct {
	enc     string
	hash    uint64 // of enc, for keyIndex
	changes []change
	prior   *prior
	// rows locate the key's silver rows when in.live is set (more than one
	// only if silver holds duplicates); prior.ref is then -1 unless the
	// row was read whole.
	rows []lake.RowID
	// whole: the fold may take values from the key's silver row, which is
	// then read whole (see markWhole).
	whole bool
	// changed: the fold replaces or drops the key's row.
	changed bool
}

// deadRow is a bronze row (ref) or a change that cannot be merged, and why.
type deadRow struct {
	ref    int
	reason string
}

func (in *input) release() {
	for _, b := range in.batches {
		b.Release()
	}
	in.batches = nil
}

// add retains b and returns the global index of its first row.
func (in *input) add(b arrow.RecordBatch) int {
	b.Retain()
	first := in.total
	in.batches = append(in.batches, b)
	in.offsets = append(in.offsets, first)
	in.total += int(b.NumRows())
	return first
}

// locate returns the batch and row of global row ref.
func (in *input) locate(ref int) (arrow.RecordBatch, int) {
	i, found := slices.BinarySearch(in.offsets, ref)
	if !found {
		i--
	}
	return in.batches[i], ref - in.offsets[i]
}

func newInput(key, srcCols []string) *input {
	in := &input{key: key, srcCols: srcCols, colIdx: map[string]int{},
		keyVals: make([]map[any]any, len(key))}
	for i, c := range srcCols {
		in.colIdx[c] = i
	}
	for i := range in.keyVals {
		in.keyVals[i] = map[any]any{}
	}
	return in
}

// part selects the keys of one pass of a build: those whose key hashes
// to i modulo n, or, routed by bucket (buckets set), those of the silver
// table's buckets that pass i covers. The zero part (n = 0) selects every
// key. The keys of a chain of key-changing UPDATEs go to one pass (chains
// maps their hashes to the chain's route: see scanChains).
type part struct {
	i, n    int
	chains  map[uint64]chainRoute
	buckets *bucketRoute
	// spill, if set, holds the rows of this pass, read from bronze once for
	// every pass (spill.go): the pass reads them there.
	spill *spill
}

// chainRoute is where the keys of a chain of key changes go: the route of
// the chain's key with the smallest hash.
type chainRoute struct {
	h uint64
	b int // its bucket, -1 if none
}

// bucketRoute routes a build's keys by the silver table's partition
// (bucket(N, col) of a key column), so that a pass writes whole buckets
// and each data file of the table holds one bucket's rows of one pass:
// with n <= N passes, pass i covers the buckets b with b*n/N == i (one
// file per bucket in all); with n > N (a multiple of N), each bucket is
// split in n/N passes by the key's hash.
type bucketRoute struct {
	b   lake.Bucketer
	col int // the bucket column's index in the key
}

// newBucketRoute returns the bucket route of silver table s with key
// columns key; nil if s is not partitioned by a bucket of a key column of
// a type lake.Bucketer maps.
func newBucketRoute(s lake.KeyedTable, key []string) *bucketRoute {
	b, ok := s.Bucketer()
	if !ok {
		return nil
	}
	col := slices.Index(key, b.Column())
	if col < 0 {
		return nil
	}
	return &bucketRoute{b: b, col: col}
}

// bucket returns the bucket of row i, given the key columns' arrays; -1
// if it has none (a null, a type the bucketer does not map).
func (r *bucketRoute) bucket(keyArrs []arrow.Array, i int) int {
	if r == nil || keyArrs[r.col] == nil {
		return -1
	}
	b, ok := r.b.Of(keyArrs[r.col], i)
	if !ok {
		return -1
	}
	return b
}

// bucketPasses rounds a build's pass count n up to one routed by bucket
// with nb buckets evenly: a divisor of nb (each pass covers as many
// buckets), or a multiple of nb when n exceeds it.
func bucketPasses(n, nb int) int {
	if n > nb {
		return (n + nb - 1) / nb * nb
	}
	for nb%n != 0 {
		n++
	}
	return n
}

func (p part) all() bool { return p.n <= 1 }

// of returns the pass (of p.n) of the key whose encoding hashes to h, in
// bucket b (-1: none; used when routed by bucket).
func (p part) of(h uint64, b int) int {
	if r, ok := p.chains[h]; ok {
		h, b = r.h, r.b
	}
	if p.buckets == nil || b < 0 {
		return int(h % uint64(p.n))
	}
	nb := p.buckets.b.Buckets()
	if p.n <= nb {
		return b * p.n / nb
	}
	k := p.n / nb
	return b*k + int(h%uint64(k))
}

// keyHash is the FNV-1a hash of a key encoding (hash/fnv's, without its
// allocation): it routes a key to a build pass, so it must never change
// while a build in passes may be resumed.
func keyHash(enc []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range enc {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// scanChains reads the bronze range (after, to] and finds the key-changing
// UPDATEs whose new row takes TOAST-unchanged values from the old key's row:
// an insert listing unchanged columns, at the seq after a delete of the same
// transaction (keyChanges). It returns, for every key of such a chain
// (transitively: 1 -> 2 -> 3), the smallest key hash of its chain, so that a
// build routes the whole chain to one pass. The result depends only on the
// range, not on the order files are read in: a resumed build routes alike.
func scanChains(ctx context.Context, b lake.Table, key []string, br *bucketRoute, after, to int64) (map[uint64]chainRoute, error) {
	dels := map[pos]uint64{}
	// bucketOf: the bucket of each key hash seen (the smallest, should two
	// keys of different buckets share a hash: independent of read order).
	bucketOf := map[uint64]int{}
	type link struct {
		del pos // the delete half's position
		h   uint64
	}
	var ins []link
	var buf []byte
	// Only deletes and inserts matter: files of snapshot chunks ('r' only,
	// by their statistics) are not read.
	ops := lake.In(bronze.ColOp, []any{string(rune(opDelete)), string(rune(opInsert))})
	err := b.ScanAppendedWhere(ctx, after, to, ops, func(rec arrow.RecordBatch) error {
		ops, _ := column(rec, bronze.ColOp).(*array.String)
		lsns, _ := column(rec, bronze.ColLSN).(*array.Int64)
		seqs, _ := column(rec, bronze.ColSeq).(*array.Int64)
		unch, _ := column(rec, bronze.ColUnchanged).(*array.List)
		if ops == nil || lsns == nil || seqs == nil {
			return nil // addChanges dead-letters such rows
		}
		keyArrs := make([]arrow.Array, len(key))
		for i, k := range key {
			if keyArrs[i] = column(rec, k); keyArrs[i] == nil {
				return nil
			}
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			if ops.IsNull(i) || lsns.IsNull(i) || seqs.IsNull(i) {
				continue
			}
			op := ops.Value(i)
			isDel := op == string(rune(opDelete))
			isIns := false
			if op == string(rune(opInsert)) && unch != nil && !unch.IsNull(i) {
				start, end := unch.ValueOffsets(i)
				isIns = end > start
			}
			if !isDel && !isIns {
				continue
			}
			var err error
			if buf, err = encodeKey(buf[:0], keyArrs, i); err != nil {
				continue
			}
			p, h := pos{lsns.Value(i), seqs.Value(i)}, keyHash(buf)
			bk := br.bucket(keyArrs, i)
			if old, seen := bucketOf[h]; !seen || bk < old {
				bucketOf[h] = bk
			}
			if isDel {
				dels[p] = h
			} else {
				ins = append(ins, link{pos{p.lsn, p.seq - 1}, h})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read bronze %s for key changes: %w", strings.Join(b.Ident(), "."), err)
	}
	parent := map[uint64]uint64{}
	var find func(uint64) uint64
	find = func(x uint64) uint64 {
		p, ok := parent[x]
		if !ok || p == x {
			return x
		}
		r := find(p)
		parent[x] = r
		return r
	}
	for _, l := range ins {
		d, ok := dels[l.del]
		if !ok || d == l.h {
			continue
		}
		ra, rb := find(d), find(l.h)
		switch {
		case ra < rb:
			parent[rb], parent[ra] = ra, ra
		case rb < ra:
			parent[ra], parent[rb] = rb, rb
		}
	}
	chains := make(map[uint64]chainRoute, len(parent))
	for h := range parent {
		if r := find(h); r != h {
			chains[h] = chainRoute{h: r, b: bucketOf[r]}
		}
	}
	return chains, nil
}

// readBronze reads the rows bronze appended after snapshot `after` up to
// `to` and groups them by key. With a part, only the rows of its keys are
// kept (and truncates, which concern every key; rows that cannot be keyed
// are kept by part 0, so they are dead-lettered once).
func (in *input) readBronze(ctx context.Context, mem memory.Allocator, b lake.Table, after, to int64, p part) error {
	scan := func(fn func(arrow.RecordBatch) error) error {
		// A persistent read failure, for the fault tests.
		if err := failpoint.Err("silver-read-bronze"); err != nil {
			return err
		}
		return scanBronze(ctx, mem, b, after, to, fn)
	}
	if p.spill != nil {
		scan = func(fn func(arrow.RecordBatch) error) error { return p.spill.read(ctx, p.i, fn) }
	}
	err := scan(func(rec arrow.RecordBatch) error {
		if !p.all() && p.spill == nil {
			sel, err := in.select_(ctx, mem, rec, p)
			if err != nil {
				return err
			}
			if sel == nil {
				return nil
			}
			defer sel.Release()
			rec = sel
		}
		first := in.add(rec)
		in.nBronze++
		in.bronze += int(rec.NumRows())
		return in.addChanges(rec, first)
	})
	if err != nil {
		return fmt.Errorf("read bronze %s: %w", strings.Join(b.Ident(), "."), err)
	}
	return nil
}

// select_ returns the rows of rec that belong to part p (nil if none), as a
// new batch the caller releases.
func (in *input) select_(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch, p part) (arrow.RecordBatch, error) {
	ib := array.NewInt64Builder(mem)
	defer ib.Release()
	routeRows(in.key, rec, p, func(i, q int) {
		if q < 0 || q == p.i {
			ib.Append(int64(i))
		}
	})
	if ib.Len() == 0 {
		return nil, nil
	}
	idx := ib.NewArray()
	defer idx.Release()
	sel, err := lake.Take(ctx, mem, rec, idx)
	if err != nil {
		return nil, fmt.Errorf("select rows of pass %d/%d: %w", p.i+1, p.n, err)
	}
	return sel, nil
}

// routeRows calls fn(i, q) for every row i of rec with the pass q of the
// n = p.n passes its key belongs to; q is -1 for a truncate, which concerns
// every pass. Rows that cannot be keyed go to pass 0, so they are
// dead-lettered once.
func routeRows(key []string, rec arrow.RecordBatch, p part, fn func(i, q int)) {
	ops, _ := column(rec, bronze.ColOp).(*array.String)
	keyArrs := make([]arrow.Array, len(key))
	for i, k := range key {
		keyArrs[i] = column(rec, k)
	}
	var buf []byte
	for i := 0; i < int(rec.NumRows()); i++ {
		if ops != nil && !ops.IsNull(i) && ops.Value(i) == string(rune(opTruncate)) {
			fn(i, -1)
			continue
		}
		var err error
		if ops == nil || slices.Contains(keyArrs, nil) {
			err = errNullKey
		} else {
			buf, err = encodeKey(buf[:0], keyArrs, i)
		}
		if err != nil {
			fn(i, 0)
			continue
		}
		fn(i, p.of(keyHash(buf), p.buckets.bucket(keyArrs, i)))
	}
}

func column(rec arrow.RecordBatch, name string) arrow.Array {
	for i, f := range rec.Schema().Fields() {
		if f.Name == name {
			return rec.Column(i)
		}
	}
	return nil
}

func (in *input) addChanges(rec arrow.RecordBatch, first int) error {
	ops, _ := column(rec, bronze.ColOp).(*array.String)
	lsns, _ := column(rec, bronze.ColLSN).(*array.Int64)
	seqs, _ := column(rec, bronze.ColSeq).(*array.Int64)
	unch, _ := column(rec, bronze.ColUnchanged).(*array.List)
	var tss *array.Timestamp
	if in.txs != nil {
		tss, _ = column(rec, bronze.ColTS).(*array.Timestamp)
	}
	if ops == nil || lsns == nil || seqs == nil {
		return fmt.Errorf("a bronze batch lacks %s, %s or %s (schema %s)", bronze.ColOp, bronze.ColLSN, bronze.ColSeq, rec.Schema())
	}
	keyArrs := make([]arrow.Array, len(in.key))
	for i, k := range in.key {
		if keyArrs[i] = column(rec, k); keyArrs[i] == nil {
			return fmt.Errorf("a bronze batch lacks key column %s", k)
		}
	}
	var unchVals *array.String
	if unch != nil {
		unchVals, _ = unch.ListValues().(*array.String)
	}
	var buf []byte
	for i := 0; i < int(rec.NumRows()); i++ {
		ref := first + i
		if ops.IsNull(i) || lsns.IsNull(i) || seqs.IsNull(i) {
			in.dead = append(in.dead, deadRow{ref, "the change has no operation or position"})
			continue
		}
		p := pos{lsns.Value(i), seqs.Value(i)}
		op := ops.Value(i)
		if len(op) != 1 {
			in.dead = append(in.dead, deadRow{ref, fmt.Sprintf("unknown operation %q", op)})
			continue
		}
		if in.txs != nil && op[0] != opRead {
			in.txs.note(p.lsn, tss, i)
		}
		switch op[0] {
		case opTruncate:
			if in.trunc == nil || in.trunc.less(p) {
				in.trunc = &p
			}
			continue
		case opRead, opInsert, opUpdate, opDelete:
		default:
			in.dead = append(in.dead, deadRow{ref, fmt.Sprintf("unknown operation %q", op)})
			continue
		}
		// error: this change cannot be merged, as a change silver cannot
		// make sense of (a dead letter whatever its cause), for tests of
		// what a dead letter does downstream (metrics, status).
		if op[0] != opRead {
			if err := failpoint.Err("silver-change-dead-letter"); err != nil {
				in.dead = append(in.dead, deadRow{ref, err.Error()})
				continue
			}
		}
		var err error
		buf, err = encodeKey(buf[:0], keyArrs, i)
		if err != nil {
			in.dead = append(in.dead, deadRow{ref, err.Error()})
			continue
		}
		c := change{pos: p, op: op[0], ref: ref}
		if unchVals != nil && !unch.IsNull(i) {
			start, end := unch.ValueOffsets(i)
			for j := start; j < end; j++ {
				name := unchVals.Value(int(j))
				col, ok := in.colIdx[name]
				if !ok {
					continue // a column silver does not have cannot be missing from it
				}
				c.unchanged = append(c.unchanged, col)
			}
			if c.op == opInsert && len(c.unchanged) > 0 {
				in.keyChangeInserts++
			}
		}
		k, added := in.keys.add(buf)
		if added && in.filterVals {
			for j, a := range keyArrs {
				v := goValue(a, i)
				in.keyVals[j][hashable(v)] = v
			}
		}
		c.key = k
		in.chs = append(in.chs, c)
	}
	return nil
}

// filter selects the silver rows of every touched key: for each key column,
// its value is one of the touched keys' values. For a one-column key that
// is exactly the touched keys; for a composite key a superset.
func (in *input) filter() *lake.Filter { return keyFilter(in.key, in.keyVals) }

// keyFilter selects the rows whose key column key[j] holds one of the
// values of vals[j], for every j.
func keyFilter(key []string, vals []map[any]any) *lake.Filter {
	fs := make([]*lake.Filter, len(key))
	for j, k := range key {
		vs := make([]any, 0, len(vals[j]))
		for _, v := range vals[j] {
			vs = append(vs, v)
		}
		fs[j] = lake.In(k, vs)
	}
	if len(fs) == 1 {
		return fs[0]
	}
	return lake.And(fs...)
}

// offerPrior makes p, a silver row of k, k's prior unless k already has a
// newer one: silver holding a key twice (counted in dups) keeps the row at
// the highest position.
func (in *input) offerPrior(k *keyed, p *prior) {
	if k.prior != nil {
		in.dups++
		if p.pos.less(k.prior.pos) {
			return
		}
	}
	k.prior = p
}

// readSilver reads the silver rows of the touched keys. On a merge-on-read
// table it reads where each row is (reading only the key columns), then
// each row's position columns only where the fold needs them (see
// boundPrior), and the values of the rows the fold takes values from (see
// markWhole): a merge then costs what it changes, not what silver holds. A
// copy-on-write table has its rows read whole (readSilverRows).
func (in *input) readSilver(ctx context.Context, s lake.KeyedTable, soft bool) error {
	if in.keys.len() == 0 {
		return nil
	}
	if _, ok := s.CurrentSnapshot(); !ok {
		return nil
	}
	if !s.MergeOnRead() {
		return in.readSilverRows(ctx, s, soft)
	}
	in.markWhole(soft)
	cols := slices.Clone(in.key)
	if soft {
		cols = append(cols, ColDeleted)
	}
	nk := len(in.key)
	vals := make([]map[any]any, nk) // key values of the rows to read whole
	for j := range vals {
		vals[j] = map[any]any{}
	}
	byInt := in.byInt()
	var keys []int64 // an integer key: the scan reports only the touched keys' rows
	if byInt != nil && intColumn(s, in.key[0]) {
		keys = slices.Collect(maps.Keys(byInt))
	}
	// The rows of the touched keys, as the scan finds them.
	type found struct {
		k       *keyed
		id      lake.RowID
		deleted bool
	}
	var rows []found
	var buf []byte
	live, err := s.ScanLiveKeys(ctx, in.filter(), cols, keys, func(rec arrow.RecordBatch, file int, at lake.Positions) error {
		keyArrs := rec.Columns()[:nk]
		var dels *array.Boolean
		if soft {
			dels, _ = rec.Column(nk).(*array.Boolean)
		}
		i64, _ := keyArrs[0].(*array.Int64)
		i32, _ := keyArrs[0].(*array.Int32)
		if byInt == nil || keyArrs[0].NullN() > 0 {
			i64, i32 = nil, nil
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			// Most rows are not touched: look them up as cheaply as possible.
			var k *keyed
			switch {
			case i64 != nil:
				k = byInt[i64.Value(i)]
			case i32 != nil:
				k = byInt[int64(i32.Value(i))]
			default:
				var err error
				if buf, err = encodeKey(buf[:0], keyArrs, i); err != nil {
					return fmt.Errorf("silver row: %w", err)
				}
				k, _ = in.keys.get(buf)
			}
			if k == nil {
				continue
			}
			f := found{k: k, id: lake.RowID{File: file, Pos: at.At(i)}}
			if dels != nil && !dels.IsNull(i) {
				f.deleted = dels.Value(i)
			}
			k.rows = append(k.rows, f.id)
			rows = append(rows, f)
			if k.whole || len(k.rows) > 1 {
				// Read whole below; a duplicate's survivor may be written back.
				for j, a := range keyArrs {
					v := goValue(a, i)
					vals[j][hashable(v)] = v
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read silver %s: %w", strings.Join(s.Ident(), "."), err)
	}
	in.live = live

	// Each row's position: bounded by its file's statistics, or read.
	first := in.firstLSN()
	at := map[lake.RowID]found{} // the rows whose position is read
	var ids []lake.RowID
	for _, f := range rows {
		if p, ok := boundPrior(live, f.k, f.id, first); ok {
			p.deleted = f.deleted
			in.offerPrior(f.k, p)
			continue
		}
		at[f.id] = f
		ids = append(ids, f.id)
	}
	err = s.ReadLiveRows(ctx, live, ids, []string{ColLSN, ColSeq}, func(rec arrow.RecordBatch, rids []lake.RowID) error {
		lsns, _ := rec.Column(0).(*array.Int64)
		seqs, _ := rec.Column(1).(*array.Int64)
		if lsns == nil || seqs == nil {
			return fmt.Errorf("silver rows lack %s or %s", ColLSN, ColSeq)
		}
		for i, id := range rids {
			f := at[id]
			in.offerPrior(f.k, &prior{pos: pos{lsns.Value(i), seqs.Value(i)}, ref: -1, deleted: f.deleted})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read silver %s: %w", strings.Join(s.Ident(), "."), err)
	}
	if len(vals[0]) == 0 {
		return nil
	}
	// The rows to read whole, by where the scan found them (readwhole.go).
	var whole []lake.RowID
	byID := map[lake.RowID]*keyed{}
	for _, f := range rows {
		if f.k.whole || len(f.k.rows) > 1 {
			whole = append(whole, f.id)
			byID[f.id] = f.k
		}
	}
	if err := in.readPriorsAt(ctx, s, live, whole, byID); err != nil {
		return fmt.Errorf("read silver %s: %w", strings.Join(s.Ident(), "."), err)
	}
	return nil
}

// boundPrior returns the prior of key k, whose only silver row is row id,
// positioned at the largest position its data file may hold (its largest
// cdc_source_lsn, the largest seq) when that is below first, the commit
// position of the earliest change of the merge (truncates included): the
// fold compares a prior's position only with the key's changes and the
// truncate, and every comparison then has the outcome the row's own
// position would give, so it need not be read. ok is false when it must be:
// the file records no bound, or a change may be older than the row, or the
// key has several rows (the newest wins) or is read whole (by position).
func boundPrior(live lake.LiveRows, k *keyed, id lake.RowID, first int64) (*prior, bool) {
	if len(k.rows) != 1 || k.whole {
		return nil, false
	}
	u, ok := live.UpperBound(id.File, ColLSN)
	if !ok || u >= first {
		return nil, false
	}
	return &prior{pos: pos{u, math.MaxInt64}, ref: -1}, true
}

// firstLSN returns the smallest commit position (LSN) of the changes of
// the touched keys and of the truncate (math.MinInt64 when there is none).
func (in *input) firstLSN() int64 {
	first := int64(math.MaxInt64)
	if in.trunc != nil {
		first = in.trunc.lsn
	}
	for i := range in.keys.all {
		for _, c := range in.keys.all[i].changes {
			first = min(first, c.pos.lsn)
		}
	}
	if first == math.MaxInt64 {
		return math.MinInt64
	}
	return first
}

// deletedRows returns the silver rows a merge-on-read merge deletes: the
// rows of every key whose row the fold replaces or drops. A kept key's row
// stays where it is, unless silver holds duplicates of it: then they are
// all deleted and the newest written back (added to rows, which stay in key
// order). It checks that no row to write takes values from a silver row
// that was not read whole (a bug, never a half-empty row).
func (in *input) deletedRows(rows []outRow, rowKeys []string, kept []keyRef, soft bool) ([]lake.RowID, []outRow, []string, error) {
	var del []lake.RowID
	for i := range in.keys.all {
		if kd := &in.keys.all[i]; kd.changed {
			del = append(del, kd.rows...)
		}
	}
	dup := false
	for _, kr := range kept {
		kd, ok := in.keys.get([]byte(kr.key))
		if ok && len(kd.rows) > 1 {
			del = append(del, kd.rows...)
			rows = append(rows, in.copyRow(kr.ref, soft))
			rowKeys = append(rowKeys, kr.key)
			dup = true
		}
	}
	if dup {
		sortByKey(rows, rowKeys)
	}
	for _, r := range rows {
		bad := r.base < 0 || r.meta < 0
		for _, f := range r.fill {
			bad = bad || f < 0
		}
		if bad {
			return nil, nil, nil, errors.New("internal error: a row to write takes values from a silver row that was not read")
		}
	}
	return del, rows, rowKeys, nil
}

// markWhole marks the keys whose silver row's values the fold may take:
// those with a change that left columns unchanged (TOAST), and, with soft
// deletes, those with a delete (a tombstone keeps the row's values). When
// any change left columns unchanged, every key with a delete is included:
// it may be the delete half of a key change (see keyChanges).
func (in *input) markWhole(soft bool) {
	in.group() // each key's changes are in place only once grouped
	anyUnchanged := false
	for i := range in.keys.all {
		for _, c := range in.keys.all[i].changes {
			anyUnchanged = anyUnchanged || len(c.unchanged) > 0
		}
	}
	for i := range in.keys.all {
		kd := &in.keys.all[i]
		for _, c := range kd.changes {
			if len(c.unchanged) > 0 || (c.op == opDelete && (soft || anyUnchanged)) {
				kd.whole = true
				break
			}
		}
	}
}

// byInt indexes the touched keys by value when the key is one integer
// column (encodeKey: 8 bytes, the value with its sign bit flipped); nil
// otherwise. Only integer key arrays are looked up in it.
func (in *input) byInt() map[int64]*keyed {
	if len(in.key) != 1 {
		return nil
	}
	m := make(map[int64]*keyed, in.keys.len())
	for i := range in.keys.all {
		kd := &in.keys.all[i]
		k := kd.enc
		if len(k) != 8 {
			return nil
		}
		m[int64(binary.BigEndian.Uint64([]byte(k))^(1<<63))] = kd
	}
	return m
}

// intColumn reports whether column c of s is an int or long column.
func intColumn(s lake.KeyedTable, c string) bool {
	fs, ok := s.ArrowSchema().FieldsByName(c)
	if !ok {
		return false
	}
	switch fs[0].Type.ID() {
	case arrow.INT32, arrow.INT64:
		return true
	}
	return false
}

// readSilverRows reads the silver rows of the touched keys whole.
func (in *input) readSilverRows(ctx context.Context, s lake.KeyedTable, soft bool) error {
	var buf []byte
	err := s.ScanWhere(ctx, in.filter(), func(rec arrow.RecordBatch) error {
		first := in.add(rec)
		lsns, _ := column(rec, ColLSN).(*array.Int64)
		seqs, _ := column(rec, ColSeq).(*array.Int64)
		if lsns == nil || seqs == nil {
			return fmt.Errorf("silver rows lack %s or %s", ColLSN, ColSeq)
		}
		var dels *array.Boolean
		if soft {
			dels, _ = column(rec, ColDeleted).(*array.Boolean)
		}
		keyArrs := make([]arrow.Array, len(in.key))
		for j, k := range in.key {
			if keyArrs[j] = column(rec, k); keyArrs[j] == nil {
				return fmt.Errorf("silver rows lack key column %s", k)
			}
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			var err error
			if buf, err = encodeKey(buf[:0], keyArrs, i); err != nil {
				return fmt.Errorf("silver row: %w", err)
			}
			k, ok := in.keys.get(buf)
			if !ok {
				in.extras = append(in.extras, keyRef{string(buf), first + i})
				continue
			}
			p := &prior{pos: pos{lsns.Value(i), seqs.Value(i)}, ref: first + i}
			if dels != nil && !dels.IsNull(i) {
				p.deleted = dels.Value(i)
			}
			in.offerPrior(k, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read silver %s: %w", strings.Join(s.Ident(), "."), err)
	}
	return nil
}

// errNullKey: a change's key column is null; it cannot be merged by key.
var errNullKey = errors.New("key column is null")

// encodeKey appends an encoding of row i's key to buf: equal keys encode
// equally, and the encodings sort like the keys (numbers, strings and
// times ascending), so that written rows follow the table's sort order.
func encodeKey(buf []byte, arrs []arrow.Array, i int) ([]byte, error) {
	for _, a := range arrs {
		if a.IsNull(i) {
			return buf, errNullKey
		}
		switch x := a.(type) {
		case *array.Int32:
			buf = binary.BigEndian.AppendUint64(buf, uint64(int64(x.Value(i)))^(1<<63))
		case *array.Int64:
			buf = binary.BigEndian.AppendUint64(buf, uint64(x.Value(i))^(1<<63))
		case *array.Date32:
			buf = binary.BigEndian.AppendUint64(buf, uint64(int64(x.Value(i)))^(1<<63))
		case *array.Time64:
			buf = binary.BigEndian.AppendUint64(buf, uint64(int64(x.Value(i)))^(1<<63))
		case *array.Timestamp:
			buf = binary.BigEndian.AppendUint64(buf, uint64(int64(x.Value(i)))^(1<<63))
		case *array.Float32:
			buf = appendFloat(buf, float64(x.Value(i)))
		case *array.Float64:
			buf = appendFloat(buf, x.Value(i))
		case *array.Boolean:
			if x.Value(i) {
				buf = append(buf, 1)
			} else {
				buf = append(buf, 0)
			}
		case *array.String:
			buf = appendBytes(buf, []byte(x.Value(i)))
		case *array.LargeString:
			buf = appendBytes(buf, []byte(x.Value(i)))
		case *array.Binary:
			buf = appendBytes(buf, x.Value(i))
		case *array.LargeBinary:
			buf = appendBytes(buf, x.Value(i))
		case *array.FixedSizeBinary:
			buf = appendBytes(buf, x.Value(i))
		case *array.Decimal128:
			v := x.Value(i)
			buf = binary.BigEndian.AppendUint64(buf, uint64(v.HighBits())^(1<<63))
			buf = binary.BigEndian.AppendUint64(buf, v.LowBits())
		default:
			return buf, fmt.Errorf("a key column of type %s is not supported", a.DataType())
		}
	}
	return buf, nil
}

func appendFloat(buf []byte, f float64) []byte {
	u := math.Float64bits(f)
	if u&(1<<63) != 0 {
		u = ^u
	} else {
		u |= 1 << 63
	}
	return binary.BigEndian.AppendUint64(buf, u)
}

// appendBytes escapes 0x00 as 0x00 0xff and terminates with 0x00 0x01, so
// that no encoding is a prefix of another and order is kept.
func appendBytes(buf, b []byte) []byte {
	for _, c := range b {
		buf = append(buf, c)
		if c == 0 {
			buf = append(buf, 0xff)
		}
	}
	return append(buf, 0, 1)
}

// goValue returns element i of a key column as the Go value lake.Filter
// takes.
func goValue(a arrow.Array, i int) any {
	switch x := a.(type) {
	case *array.Int32:
		return x.Value(i)
	case *array.Int64:
		return x.Value(i)
	case *array.Date32:
		return x.Value(i)
	case *array.Time64:
		return x.Value(i)
	case *array.Timestamp:
		return x.Value(i)
	case *array.Float32:
		return x.Value(i)
	case *array.Float64:
		return x.Value(i)
	case *array.Boolean:
		return x.Value(i)
	case *array.String:
		return x.Value(i)
	case *array.LargeString:
		return x.Value(i)
	case *array.Binary:
		return slices.Clone(x.Value(i))
	case *array.LargeBinary:
		return slices.Clone(x.Value(i))
	case *array.FixedSizeBinary:
		return slices.Clone(x.Value(i))
	case *array.Decimal128:
		return x.Value(i)
	}
	return nil
}

// hashable makes a value usable as a map key ([]byte is not).
func hashable(v any) any {
	if b, ok := v.([]byte); ok {
		return "\x00bytes:" + string(b)
	}
	if d, ok := v.(decimal128.Num); ok {
		return [2]uint64{uint64(d.HighBits()), d.LowBits()}
	}
	return v
}
