package silver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
)

// A build in passes folds one hash class of the keys per pass, so that
// its memory stays bounded; reading the whole bronze range from the lake
// for every pass cost most of the build (Parquet decoding, n times). So
// the range is read once, and each row is written to its pass's spill
// file: local, uncompressed Arrow IPC, read back with little more than a
// copy. The spill is scratch: it lives in a temporary directory removed
// when the build returns; a crash leaves the build's progress in the
// summary, and the resumed build spills the passes it still has to do;
// the dead build's spill is removed by the next one (its lock is free).

// spill holds the bronze rows of a build's passes, per pass.
type spill struct {
	dir   string
	lock  *os.File // flocked while the spill is in use
	mem   memory.Allocator
	files [][]string // per pass: its files, in order (a new one per schema)
	rows  []int64    // per pass: the rows written
}

// spillWriter is the open spill file of one pass.
type spillWriter struct {
	f   *os.File
	buf *bufio.Writer
	w   *ipc.Writer
	sch *arrow.Schema
}

func (w *spillWriter) close() error {
	err := w.w.Close()
	if ferr := w.buf.Flush(); err == nil {
		err = ferr
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// spillPasses reads the bronze range (after, to] of b once and writes the
// rows of passes p.i .. p.n-1 (routed like select_: routeRows) to a new
// spill under dir ("" : the system's temporary directory). The caller
// removes it (spill.remove).
func spillPasses(ctx context.Context, mem memory.Allocator, dir string, b *lake.Table, key []string, after, to int64, p part) (_ *spill, err error) {
	s, err := newSpill(dir, mem, p.n)
	if err != nil {
		return nil, err
	}
	d := s.dir
	ws := make([]*spillWriter, p.n)
	defer func() {
		for _, w := range ws {
			if w != nil {
				if cerr := w.close(); err == nil && cerr != nil {
					err = fmt.Errorf("write spill file %s: %w", w.f.Name(), cerr)
				}
			}
		}
		if err != nil {
			s.remove()
		}
	}()
	pend := newPending(p.n)
	defer pend.release()
	idx := make([]*array.Int64Builder, p.n)
	for q := p.i; q < p.n; q++ {
		idx[q] = array.NewInt64Builder(mem)
		defer idx[q].Release()
	}
	err = b.ScanAppended(ctx, after, to, func(rec arrow.RecordBatch) error {
		routeRows(key, rec, p, func(i, q int) {
			if q < 0 {
				for r := p.i; r < p.n; r++ {
					idx[r].Append(int64(i))
				}
			} else if q >= p.i {
				idx[q].Append(int64(i))
			}
		})
		for q := p.i; q < p.n; q++ {
			if idx[q].Len() == 0 {
				continue
			}
			if err := s.add(ctx, ws, pend, q, rec, idx[q]); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		for q := p.i; q < p.n && err == nil; q++ {
			err = s.flush(ws, pend, q)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("spill the bronze rows of %d build passes to %s: %w", p.n-p.i, d, err)
	}
	return s, nil
}

// A bronze batch (8192 rows) routed to many passes leaves each a few rows:
// written as they come, a pass of a build in 96 passes was read back as
// over a thousand batches of ~85 rows (an IPC message, an input batch and a
// gather part each). So each pass's rows are coalesced before they are
// written, into batches of up to spillBatchRows, while all passes together
// hold at most spillPending bytes of them (beyond, the pass with the most
// is written).
const (
	spillBatchRows = 8192
	spillPending   = 16 << 20
)

// pending holds, per pass, the rows not yet written.
type pending struct {
	recs  [][]arrow.RecordBatch
	rows  []int64
	bytes []int64
	total int64
}

func newPending(n int) *pending {
	return &pending{recs: make([][]arrow.RecordBatch, n), rows: make([]int64, n), bytes: make([]int64, n)}
}

func (pd *pending) release() {
	for q, rs := range pd.recs {
		for _, r := range rs {
			r.Release()
		}
		pd.recs[q] = nil
	}
}

// add queues the rows idx selects from rec (idx is reset) for pass q's
// spill file, and writes what the pass, or all passes together, hold
// beyond the bounds.
func (s *spill) add(ctx context.Context, ws []*spillWriter, pd *pending, q int, rec arrow.RecordBatch, idx *array.Int64Builder) error {
	ia := idx.NewArray()
	defer ia.Release()
	sel := rec
	if int64(ia.Len()) == rec.NumRows() {
		rec.Retain()
	} else {
		var err error
		if sel, err = lake.Take(ctx, s.mem, rec, ia); err != nil {
			return err
		}
	}
	if rs := pd.recs[q]; len(rs) > 0 && !rs[0].Schema().Equal(sel.Schema()) {
		if err := s.flush(ws, pd, q); err != nil {
			sel.Release()
			return err
		}
	}
	b := lake.RecordBytes(sel)
	pd.recs[q] = append(pd.recs[q], sel)
	pd.rows[q] += sel.NumRows()
	pd.bytes[q] += b
	pd.total += b
	if pd.rows[q] >= spillBatchRows {
		if err := s.flush(ws, pd, q); err != nil {
			return err
		}
	}
	for pd.total > spillPending {
		most := 0
		for r := range pd.bytes {
			if pd.bytes[r] > pd.bytes[most] {
				most = r
			}
		}
		if err := s.flush(ws, pd, most); err != nil {
			return err
		}
	}
	return nil
}

// flush writes pass q's queued rows as one batch.
func (s *spill) flush(ws []*spillWriter, pd *pending, q int) error {
	rs := pd.recs[q]
	if len(rs) == 0 {
		return nil
	}
	pd.recs[q] = nil
	pd.total -= pd.bytes[q]
	pd.rows[q], pd.bytes[q] = 0, 0
	defer func() {
		for _, r := range rs {
			r.Release()
		}
	}()
	rec := rs[0]
	if len(rs) > 1 {
		var err error
		if rec, err = concatRecords(s.mem, rs); err != nil {
			return err
		}
		defer rec.Release()
	}
	return s.write(ws, q, rec)
}

// concatRecords concatenates batches of one schema into one.
func concatRecords(mem memory.Allocator, rs []arrow.RecordBatch) (arrow.RecordBatch, error) {
	sc := rs[0].Schema()
	cols := make([]arrow.Array, sc.NumFields())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	parts := make([]arrow.Array, len(rs))
	var n int64
	for _, r := range rs {
		n += r.NumRows()
	}
	for j := range cols {
		for i, r := range rs {
			parts[i] = r.Column(j)
		}
		c, err := array.Concatenate(parts, mem)
		if err != nil {
			return nil, fmt.Errorf("concatenate column %s: %w", sc.Field(j).Name, err)
		}
		cols[j] = c
	}
	return array.NewRecordBatch(sc, cols, n), nil
}

// spillBuffers bounds the write buffers of a spill's open files together:
// a build of many passes has one open per pass (90 buffers of 1 MiB were a
// third of a 256 MiB budget). The rows are coalesced before they are
// written (pending), so the buffers need not be large.
const spillBuffers = 4 << 20

// spillBuffer is the write buffer of one of n open spill files.
func spillBuffer(n int) int {
	return max(64<<10, min(1<<20, spillBuffers/max(n, 1)))
}

// spillPrefix names the directory of one build's spill.
const spillPrefix = "tidemark-silver-build-"

// newSpill creates the directory of a spill for n passes under dir (""
// : the system's temporary directory), locked while the spill is in use,
// and removes the spills of builds that died (kill -9) under dir: their
// lock is free.
func newSpill(dir string, mem memory.Allocator, n int) (*spill, error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create the spill directory of a silver build: %w", err)
		}
	}
	removeStaleSpills(dir)
	d, err := os.MkdirTemp(dir, spillPrefix)
	if err != nil {
		return nil, fmt.Errorf("create the spill directory of a silver build: %w", err)
	}
	// Locked before it is named "lock": a cleaner never takes a new
	// spill for a dead one.
	lock, err := os.Create(filepath.Join(d, "lock.new"))
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err == nil {
		err = os.Rename(lock.Name(), filepath.Join(d, "lock"))
	}
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		os.RemoveAll(d)
		return nil, fmt.Errorf("lock the spill directory %s of a silver build: %w", d, err)
	}
	return &spill{dir: d, lock: lock, mem: mem, files: make([][]string, n), rows: make([]int64, n)}, nil
}

// removeStaleSpills removes the spill directories under dir whose lock no
// process holds.
func removeStaleSpills(dir string) {
	if dir == "" {
		dir = os.TempDir()
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), spillPrefix) {
			continue
		}
		d := filepath.Join(dir, e.Name())
		f, err := os.Open(filepath.Join(d, "lock"))
		if err != nil {
			continue // being created, or not ours
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.RemoveAll(d)
		}
		f.Close()
	}
}

// write appends sel to pass q's spill file, opening a new file for a new
// schema.
func (s *spill) write(ws []*spillWriter, q int, sel arrow.RecordBatch) error {
	w := ws[q]
	if w != nil && !w.sch.Equal(sel.Schema()) {
		if err := w.close(); err != nil {
			return err
		}
		ws[q], w = nil, nil
	}
	if w == nil {
		name := filepath.Join(s.dir, fmt.Sprintf("pass-%d-%d.arrows", q, len(s.files[q])))
		f, err := os.Create(name)
		if err != nil {
			return err
		}
		buf := bufio.NewWriterSize(f, spillBuffer(len(ws)))
		w = &spillWriter{f: f, buf: buf, sch: sel.Schema(),
			w: ipc.NewWriter(buf, ipc.WithSchema(sel.Schema()), ipc.WithAllocator(s.mem))}
		ws[q] = w
		s.files[q] = append(s.files[q], name)
	}
	s.rows[q] += sel.NumRows()
	return w.w.Write(sel)
}

// read calls fn with the spilled batches of pass q, in the order they were
// written. fn may retain them.
func (s *spill) read(ctx context.Context, q int, fn func(arrow.RecordBatch) error) error {
	for _, name := range s.files[q] {
		if err := s.readFile(ctx, name, fn); err != nil {
			return fmt.Errorf("read spill file %s: %w", name, err)
		}
	}
	return nil
}

func (s *spill) readFile(ctx context.Context, name string, fn func(arrow.RecordBatch) error) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := ipc.NewReader(bufio.NewReaderSize(f, 1<<20), ipc.WithAllocator(s.mem))
	if err != nil {
		return err
	}
	defer r.Release()
	for r.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(r.RecordBatch()); err != nil {
			return err
		}
	}
	if err := r.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// remove deletes the spill's files.
func (s *spill) remove() {
	if s == nil {
		return
	}
	if strings.HasPrefix(filepath.Base(s.dir), spillPrefix) {
		os.RemoveAll(s.dir)
	}
	s.lock.Close()
}
