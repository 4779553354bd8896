package iceberg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/schema"
	iceberggo "github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// This file is ScanLiveKeys' read of one data file. A merge's key column
// holds a few touched keys among many: the key column is decoded straight
// from its pages into a reused buffer and probed there, and the other
// columns are read only for the row groups that hold a touched key, and
// kept only for its rows. Columns that need a conversion the probe does not
// know (anything but int, long and boolean columns written as such) are
// read as ScanLive reads them, and probed after.

// columns are the columns a scan reports, typed as the table's current
// schema, and read straight from their pages where a file allows (see
// direct).
type columns struct {
	fields []iceberggo.NestedField
	schema *arrow.Schema // of the batches reported
}

func newColumns(want *iceberggo.Schema) (columns, error) {
	sc, err := table.SchemaToArrowSchema(want, nil, false, false)
	if err != nil {
		return columns{}, err
	}
	return columns{fields: want.Fields(), schema: sc}, nil
}

// keyProbe picks the rows whose first column holds one of its keys.
type keyProbe struct {
	columns
	keys  []int64  // sorted, distinct
	set   []uint64 // the keys' filter (buildFilter)
	shift uint
}

func newKeyProbe(want *iceberggo.Schema, keys []int64) (*keyProbe, error) {
	fields := want.Fields()
	switch fields[0].Type.(type) {
	case iceberggo.Int32Type, iceberggo.Int64Type:
	default:
		return nil, fmt.Errorf("keys are integers, but column %s is %s", fields[0].Name, fields[0].Type)
	}
	cols, err := newColumns(want)
	if err != nil {
		return nil, err
	}
	ks := slices.Clone(keys)
	slices.Sort(ks)
	p := &keyProbe{columns: cols, keys: slices.Compact(ks)}
	p.buildFilter()
	return p, nil
}

// match appends to out the indices i of vals whose value is a key (and
// valid[i], when valid is not nil). When the keys within the range of
// vals are few and vals ascend (the table's sort order), each is looked up
// among them; otherwise each value is tested against the keys' filter
// (few pass it), and the passing ones looked up among the keys.
func (p *keyProbe) match(vals []int64, valid []bool, out []int32) []int32 {
	if len(p.keys) == 0 || len(vals) == 0 {
		return out
	}
	if valid == nil && vals[0] <= vals[len(vals)-1] {
		ks := p.within(vals[0], vals[len(vals)-1])
		if len(ks)*bits.Len(uint(len(vals))) < len(vals) && ascending(vals) {
			i := 0
			for _, k := range ks {
				d, _ := slices.BinarySearch(vals[i:], k)
				for i += d; i < len(vals) && vals[i] == k; i++ {
					out = append(out, int32(i))
				}
			}
			return out
		}
	}
	set, shift := p.set, p.shift
	for i, v := range vals {
		if h := (uint64(v) * fibHash) >> shift; set[h>>6]&(1<<(h&63)) == 0 {
			continue
		}
		if valid != nil && !valid[i] {
			continue
		}
		if _, ok := slices.BinarySearch(p.keys, v); ok {
			out = append(out, int32(i))
		}
	}
	return out
}

// fibHash is 2^64 divided by the golden ratio: multiplying by it spreads
// consecutive keys over the filter's bits.
const fibHash = 0x9E3779B97F4A7C15

// buildFilter sets p's filter: a bit set of about 32 bits per key (at
// most 2^26), bit h(k) set for each key k, so that about one value in 32
// of those that are not keys passes it.
func (p *keyProbe) buildFilter() {
	n := 64
	for n < 32*len(p.keys) && n < 1<<26 {
		n <<= 1
	}
	p.set = make([]uint64, n/64)
	p.shift = uint(64 - bits.TrailingZeros(uint(n)))
	for _, k := range p.keys {
		h := (uint64(k) * fibHash) >> p.shift
		p.set[h>>6] |= 1 << (h & 63)
	}
}

// within returns the keys in [lo, hi].
func (p *keyProbe) within(lo, hi int64) []int64 {
	i, _ := slices.BinarySearch(p.keys, lo)
	j := i + sort.Search(len(p.keys)-i, func(j int) bool { return p.keys[i+j] > hi })
	return p.keys[i:j]
}

// ascending reports whether vals never decrease.
func ascending(vals []int64) bool {
	for i := 1; i < len(vals); i++ {
		if vals[i] < vals[i-1] {
			return false
		}
	}
	return true
}

// overlaps reports whether one of p's keys lies in [lo, hi].
func (p *keyProbe) overlaps(lo, hi int64) bool { return len(p.within(lo, hi)) > 0 }

// mayHold reports whether data file df may hold a row of one of p's keys:
// false only when the key column's bounds its manifest entry records hold
// none. A key column widened from int to long has 4-byte bounds in the
// files written before: both widths are read (iceberg-go's planning
// cannot, see planExpr; and it prunes nothing with more than 200 keys).
func (p *keyProbe) mayHold(df iceberggo.DataFile) bool {
	id := p.fields[0].ID
	lo, ok := intBound(df.LowerBoundValues()[id])
	if !ok {
		return true
	}
	hi, ok := intBound(df.UpperBoundValues()[id])
	if !ok {
		return true
	}
	return p.overlaps(lo, hi)
}

// intBound decodes an int or long bound in Iceberg's single-value
// encoding (little-endian, 4 or 8 bytes).
func intBound(b []byte) (int64, bool) {
	switch len(b) {
	case 4:
		return int64(int32(binary.LittleEndian.Uint32(b))), true
	case 8:
		return int64(binary.LittleEndian.Uint64(b)), true
	}
	return 0, false
}

// groupMayHold reports whether the row group md may hold a row of one of
// p's keys: false only when the minimum and maximum its statistics record
// for the key column (leaf) hold none.
func (p *keyProbe) groupMayHold(md *metadata.RowGroupMetaData, leaf int) bool {
	if md.Schema.Column(leaf).SortOrder() != schema.SortSIGNED {
		return true
	}
	cc, err := md.ColumnChunk(leaf)
	if err != nil {
		return true
	}
	st, err := cc.Statistics()
	if err != nil || st == nil || !st.HasMinMax() {
		return true
	}
	switch s := st.(type) {
	case *metadata.Int64Statistics:
		return p.overlaps(s.Min(), s.Max())
	case *metadata.Int32Statistics:
		return p.overlaps(int64(s.Min()), int64(s.Max()))
	}
	return true
}

// filter calls fn with the rows of rec (at positions pos) whose key, in
// its first column, is one of p's keys.
func (p *keyProbe) filter(ctx context.Context, mem memory.Allocator, rec arrow.RecordBatch, pos Positions,
	fn func(arrow.RecordBatch, Positions) error) error {
	var vals []int64
	var valid []bool
	col := rec.Column(0)
	switch a := col.(type) {
	case *array.Int64:
		vals = a.Int64Values()
	case *array.Int32:
		vals = make([]int64, a.Len())
		for i, v := range a.Int32Values() {
			vals[i] = int64(v)
		}
	default:
		return fmt.Errorf("key column %s is read as %s, not an integer", p.fields[0].Name, col.DataType())
	}
	if col.NullN() > 0 {
		valid = make([]bool, col.Len())
		for i := range valid {
			valid[i] = col.IsValid(i)
		}
	}
	idx := p.match(vals, valid, nil)
	if len(idx) == 0 {
		return nil
	}
	at := make([]int64, len(idx))
	ib := array.NewInt32Builder(mem)
	defer ib.Release()
	for k, i := range idx {
		at[k] = pos.At(int(i))
		ib.Append(i)
	}
	ia := ib.NewArray()
	defer ia.Release()
	sel, err := Take(ctx, mem, rec, ia)
	if err != nil {
		return err
	}
	defer sel.Release()
	return fn(sel, Positions{Pos: at})
}

// scanned counts the data files readLiveKeys opened and the row groups
// whose key column it decoded (the tests check what pruning spares).
var scanned struct{ files, groups atomic.Int64 }

// liveKeysChunk is the rows of a row group readLiveKeys reads at once (a
// variable for the tests).
var liveKeysChunk int64 = scanLiveBatch

// keyScratch is one reader's buffers, reused from file to file.
type keyScratch struct {
	cols    []colBuf
	matched []int32
}

// colBuf holds one column's values of a chunk of rows.
type colBuf struct {
	i64   []int64
	i32   []int32
	b     []bool
	defs  []int16
	valid []bool // nil: no nulls
}

// direct reports whether every column of the file at leaves can be read
// straight from its pages: present, and stored as the type the table has.
func (p *columns) direct(pf *file.Reader, leaves []int) bool {
	sc := pf.MetaData().Schema
	for i, l := range leaves {
		if l < 0 {
			return false
		}
		col := sc.Column(l)
		if col.MaxRepetitionLevel() != 0 {
			return false
		}
		pt := col.PhysicalType()
		switch p.fields[i].Type.(type) {
		case iceberggo.Int64Type:
			if pt != parquet.Types.Int64 && pt != parquet.Types.Int32 {
				return false
			}
		case iceberggo.Int32Type:
			if pt != parquet.Types.Int32 {
				return false
			}
		case iceberggo.BooleanType:
			if pt != parquet.Types.Boolean {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// readLiveKeys is readLiveFile with pick, reading the columns straight
// from their pages when the file allows.
func readLiveKeys(ctx context.Context, fs icebergio.IO, mem memory.Allocator, tbl *table.Table, want *iceberggo.Schema,
	pick *keyProbe, sc *keyScratch, df iceberggo.DataFile, deleted []int64, fn func(arrow.RecordBatch, Positions) error) error {
	pf, leaves, err := openLeaves(fs, df.FilePath(), pick.fields)
	if err != nil {
		return err
	}
	defer pf.Close()
	scanned.files.Add(1)
	if !pick.direct(pf, leaves) {
		return readLive(ctx, pf, mem, tbl, want, pick, deleted, fn)
	}
	if len(sc.cols) < len(leaves) {
		sc.cols = make([]colBuf, len(leaves))
	}
	var at int64 // position of the first row of the row group
	for g := 0; g < pf.NumRowGroups(); g++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if md := pf.MetaData().RowGroup(g); !pick.groupMayHold(md, leaves[0]) {
			at += md.NumRows()
			continue
		}
		scanned.groups.Add(1)
		rg := pf.RowGroup(g)
		if err := pick.readGroup(rg, leaves, at, sc, mem, deleted, fn); err != nil {
			return fmt.Errorf("row group %d: %w", g, err)
		}
		at += rg.NumRows()
	}
	if at != pf.NumRows() {
		return fmt.Errorf("read %d rows of %d", at, pf.NumRows())
	}
	return nil
}

// readGroup reads row group rg (its first row at position at) in chunks:
// the key column of every row, the other columns only from the first chunk
// that holds a key on (the rows before are skipped, not decoded).
func (p *keyProbe) readGroup(rg *file.RowGroupReader, leaves []int, at int64, sc *keyScratch, mem memory.Allocator,
	deleted []int64, fn func(arrow.RecordBatch, Positions) error) error {
	n := rg.NumRows()
	readers := make([]file.ColumnChunkReader, len(leaves))
	defer func() {
		for _, r := range readers {
			if r != nil {
				r.Close() // its page buffers go back to pagePool
			}
		}
	}()
	done := make([]int64, len(leaves)) // rows each reader has consumed
	var err error
	if readers[0], err = rg.Column(leaves[0]); err != nil {
		return err
	}
	for off := int64(0); off < n; off += liveKeysChunk {
		m := min(liveKeysChunk, n-off)
		key := &sc.cols[0]
		if err := readColumn(readers[0], m, key); err != nil {
			return fmt.Errorf("column %s: %w", p.fields[0].Name, err)
		}
		done[0] += m
		var vals []int64
		if readers[0].Descriptor().PhysicalType() == parquet.Types.Int32 {
			vals = widen(key, m)
		} else {
			vals = key.i64[:m]
		}
		sc.matched = p.match(vals, key.valid, sc.matched[:0])
		sc.matched = dropDeleted(sc.matched, at+off, deleted)
		if len(sc.matched) == 0 {
			continue
		}
		// Few matched rows: only theirs are decoded (the others skipped,
		// which decodes no value); many: the whole chunk.
		sparse := int64(len(sc.matched)) <= m/16
		for i := 1; i < len(leaves); i++ {
			if readers[i] == nil {
				if readers[i], err = rg.Column(leaves[i]); err != nil {
					return err
				}
			}
			c := &sc.cols[i]
			c.size(readers[i], m)
			for k := 0; k < len(sc.matched); {
				// The run of rows [a, b) to read.
				a, b := int64(0), m
				if sparse {
					a, b = int64(sc.matched[k]), int64(sc.matched[k])+1
					for k++; k < len(sc.matched) && int64(sc.matched[k]) == b; k++ {
						b++
					}
				} else {
					k = len(sc.matched)
				}
				if skip := off + a - done[i]; skip > 0 {
					if err := skipRows(readers[i], skip); err != nil {
						return fmt.Errorf("column %s: %w", p.fields[i].Name, err)
					}
					done[i] += skip
				}
				if err := c.read(readers[i], a, b-a); err != nil {
					return fmt.Errorf("column %s: %w", p.fields[i].Name, err)
				}
				done[i] += b - a
			}
		}
		pos := make([]int64, len(sc.matched))
		for k, i := range sc.matched {
			pos[k] = at + off + int64(i)
		}
		rec := p.gather(mem, sc, readers)
		err := fn(rec, Positions{Pos: pos})
		rec.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// widen returns the key values of a chunk stored as int32 as int64.
func widen(c *colBuf, m int64) []int64 {
	c.i64 = slices.Grow(c.i64[:0], int(m))[:m]
	for i, v := range c.i32[:m] {
		c.i64[i] = int64(v)
	}
	return c.i64
}

// dropDeleted removes from idx (ascending row indices of a chunk whose
// first row is at position first) the rows at the sorted positions deleted.
func dropDeleted(idx []int32, first int64, deleted []int64) []int32 {
	if len(deleted) == 0 || len(idx) == 0 {
		return idx
	}
	lo, _ := slices.BinarySearch(deleted, first+int64(idx[0]))
	d := deleted[lo:]
	out := idx[:0]
	for _, i := range idx {
		p := first + int64(i)
		for len(d) > 0 && d[0] < p {
			d = d[1:]
		}
		if len(d) > 0 && d[0] == p {
			continue
		}
		out = append(out, i)
	}
	return out
}

// gather builds the batch of the matched rows of the chunk read into sc.
func (p *columns) gather(mem memory.Allocator, sc *keyScratch, readers []file.ColumnChunkReader) arrow.RecordBatch {
	cols := make([]arrow.Array, len(p.fields))
	for i, f := range p.fields {
		c := &sc.cols[i]
		int32Stored := readers[i].Descriptor().PhysicalType() == parquet.Types.Int32
		switch f.Type.(type) {
		case iceberggo.Int64Type:
			b := array.NewInt64Builder(mem)
			b.Reserve(len(sc.matched))
			for _, r := range sc.matched {
				switch {
				case c.valid != nil && !c.valid[r]:
					b.UnsafeAppendBoolToBitmap(false)
				case int32Stored:
					b.UnsafeAppend(int64(c.i32[r]))
				default:
					b.UnsafeAppend(c.i64[r])
				}
			}
			cols[i] = b.NewArray()
			b.Release()
		case iceberggo.Int32Type:
			b := array.NewInt32Builder(mem)
			b.Reserve(len(sc.matched))
			for _, r := range sc.matched {
				if c.valid != nil && !c.valid[r] {
					b.UnsafeAppendBoolToBitmap(false)
				} else {
					b.UnsafeAppend(c.i32[r])
				}
			}
			cols[i] = b.NewArray()
			b.Release()
		case iceberggo.BooleanType:
			b := array.NewBooleanBuilder(mem)
			b.Reserve(len(sc.matched))
			for _, r := range sc.matched {
				if c.valid != nil && !c.valid[r] {
					b.UnsafeAppendBoolToBitmap(false)
				} else {
					b.UnsafeAppend(c.b[r])
				}
			}
			cols[i] = b.NewArray()
			b.Release()
		}
	}
	rec := array.NewRecordBatch(p.schema, cols, int64(len(sc.matched)))
	for _, c := range cols {
		c.Release()
	}
	return rec
}

// errShortColumn: a column chunk holds fewer rows than its row group.
var errShortColumn = errors.New("the column chunk ends before its row group")

// readColumn reads the next m rows of column cr into c (values at their
// row's index; c.valid says which are not null, nil if none is).
func readColumn(cr file.ColumnChunkReader, m int64, c *colBuf) error {
	c.size(cr, m)
	return c.read(cr, 0, m)
}

// size makes c hold m rows of column cr's type, none null.
func (c *colBuf) size(cr file.ColumnChunkReader, m int64) {
	switch cr.(type) {
	case *file.Int64ColumnChunkReader:
		c.i64 = slices.Grow(c.i64[:0], int(m))[:m]
	case *file.Int32ColumnChunkReader:
		c.i32 = slices.Grow(c.i32[:0], int(m))[:m]
	case *file.BooleanColumnChunkReader:
		c.b = slices.Grow(c.b[:0], int(m))[:m]
	}
	if cr.Descriptor().MaxDefinitionLevel() > 0 {
		c.defs = slices.Grow(c.defs[:0], int(m))[:m]
	}
	c.valid = nil
}

// read reads the next n rows of column cr into c's rows [lo, lo+n).
func (c *colBuf) read(cr file.ColumnChunkReader, lo, n int64) error {
	maxDef := cr.Descriptor().MaxDefinitionLevel()
	var defs []int16
	if maxDef > 0 {
		defs = c.defs[lo : lo+n]
	}
	for got := int64(0); got < n; {
		var total int64
		var vals int
		var err error
		d := sub(defs, got)
		switch r := cr.(type) {
		case *file.Int64ColumnChunkReader:
			v := c.i64[lo+got : lo+n]
			if total, vals, err = r.ReadBatch(n-got, v, d, nil); err == nil && int64(vals) < total {
				spaced(v[:total], d, maxDef, vals)
			}
		case *file.Int32ColumnChunkReader:
			v := c.i32[lo+got : lo+n]
			if total, vals, err = r.ReadBatch(n-got, v, d, nil); err == nil && int64(vals) < total {
				spaced(v[:total], d, maxDef, vals)
			}
		case *file.BooleanColumnChunkReader:
			v := c.b[lo+got : lo+n]
			if total, vals, err = r.ReadBatch(n-got, v, d, nil); err == nil && int64(vals) < total {
				spaced(v[:total], d, maxDef, vals)
			}
		default:
			return fmt.Errorf("unexpected column reader %T", cr)
		}
		if err != nil {
			return err
		}
		if total == 0 {
			return errShortColumn
		}
		got += total
	}
	for i, d := range defs {
		if d < maxDef {
			if c.valid == nil {
				c.valid = make([]bool, len(c.defs))
				for k := range c.valid {
					c.valid[k] = true
				}
			}
			c.valid[lo+int64(i)] = false
		}
	}
	return nil
}

// sub is defs from lo, or nil.
func sub(defs []int16, lo int64) []int16 {
	if defs == nil {
		return nil
	}
	return defs[lo:]
}

// spaced moves the first n values of v (the non-null ones, dense) to the
// rows whose definition level is maxDef.
func spaced[T any](v []T, defs []int16, maxDef int16, n int) {
	k := n - 1
	for r := len(v) - 1; r >= 0 && k >= 0; r-- {
		if defs[r] == maxDef {
			v[r] = v[k]
			k--
		}
	}
}

// skipRows skips the next n rows of column cr.
func skipRows(cr file.ColumnChunkReader, n int64) error {
	type skipper interface {
		Skip(int64) (int64, error)
	}
	s, ok := cr.(skipper)
	if !ok {
		return fmt.Errorf("column reader %T cannot skip", cr)
	}
	_, err := s.Skip(n)
	return err
}
