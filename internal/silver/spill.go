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

	"github.com/tidemark/tidemark/internal/lake"
)

// A build in passes folds one hash class of the keys per pass, so that
// its memory stays bounded (a merge step in parts, parts.go, likewise);
// reading the whole bronze range from the lake for every pass cost most of
// the build (Parquet decoding, n times). So
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
func spillPasses(ctx context.Context, mem memory.Allocator, dir string, b lake.Table, key []string, after, to int64, p part) (_ *spill, err error) {
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
	idx := make([]*array.Int64Builder, p.n)
	for q := p.i; q < p.n; q++ {
		idx[q] = array.NewInt64Builder(mem)
		defer idx[q].Release()
	}
	// route writes the rows of a group of bronze batches to their passes.
	route := func(g *spillGroup) error {
		rec, err := g.take(mem)
		if err != nil || rec == nil {
			return err
		}
		defer rec.Release()
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
			if err := s.write(ctx, ws, q, rec, idx[q]); err != nil {
				return err
			}
		}
		return nil
	}
	g := &spillGroup{}
	defer g.release()
	err = scanBronze(ctx, mem, b, after, to, func(rec arrow.RecordBatch) error {
		if !g.fits(rec) {
			if err := route(g); err != nil {
				return err
			}
		}
		g.add(rec)
		if g.full() {
			return route(g)
		}
		return nil
	})
	if err == nil {
		err = route(g)
	}
	if err != nil {
		return nil, fmt.Errorf("spill the bronze rows of %d passes to %s: %w", p.n-p.i, d, err)
	}
	return s, nil
}

// A bronze batch holds 8192 rows: routed to each of many passes alone, it
// left each a few rows (~85 rows of each of 96 passes), so that the spill
// cost a Take and an IPC message per pass and batch (most of it their
// overhead, not the rows), and each pass read back over a thousand tiny
// batches. So batches are routed in groups of up to spillGroupRows rows or
// spillGroupBytes of Arrow memory.
const (
	spillGroupRows  = 65536
	spillGroupBytes = 8 << 20
)

// spillGroup is bronze batches of one schema waiting to be routed.
type spillGroup struct {
	recs        []arrow.RecordBatch
	rows, bytes int64
}

// fits reports whether rec may join the group: an empty group, or one of
// the same schema, if rec does not fill a group by itself. A batch that
// does (one holding a large value) is routed alone, not copied into one
// batch with the group's others (take): for a 200 MiB value snapshotted
// after a small chunk, that copy was the peak of the silver build.
func (g *spillGroup) fits(rec arrow.RecordBatch) bool {
	if len(g.recs) == 0 {
		return true
	}
	return g.recs[0].Schema().Equal(rec.Schema()) &&
		rec.NumRows() < spillGroupRows && lake.RecordBytes(rec) < spillGroupBytes
}

func (g *spillGroup) add(rec arrow.RecordBatch) {
	rec.Retain()
	g.recs = append(g.recs, rec)
	g.rows += rec.NumRows()
	g.bytes += lake.RecordBytes(rec)
}

func (g *spillGroup) full() bool { return g.rows >= spillGroupRows || g.bytes >= spillGroupBytes }

// take empties the group and returns its rows as one batch (nil if none),
// which the caller releases.
func (g *spillGroup) take(mem memory.Allocator) (arrow.RecordBatch, error) {
	defer g.release()
	switch len(g.recs) {
	case 0:
		return nil, nil
	case 1:
		g.recs[0].Retain()
		return g.recs[0], nil
	}
	return concatRecords(mem, g.recs)
}

func (g *spillGroup) release() {
	for _, r := range g.recs {
		r.Release()
	}
	g.recs, g.rows, g.bytes = nil, 0, 0
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
// third of a 256 MiB budget). Rows are routed in groups (spillGroup), so
// each write is of hundreds of rows: the buffers need not be large.
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

// write appends the rows idx selects from rec (idx is reset) to pass q's
// spill file, opening a new file for a new schema.
func (s *spill) write(ctx context.Context, ws []*spillWriter, q int, rec arrow.RecordBatch, idx *array.Int64Builder) error {
	ia := idx.NewArray()
	defer ia.Release()
	sel := rec
	if int64(ia.Len()) != rec.NumRows() {
		var err error
		if sel, err = lake.Take(ctx, s.mem, rec, ia); err != nil {
			return err
		}
		defer sel.Release()
	}
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
