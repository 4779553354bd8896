package export

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// Defaults of Options.
const (
	DefaultLateness = time.Second
	// DefaultMaxBytes bounds the rows one step of a pass holds.
	DefaultMaxBytes = 64 << 20
	// maxWindows is the most windows one step of a pass writes.
	maxWindows = 64
)

// Options say what an Exporter writes.
type Options struct {
	// Source is the pipeline whose bronze tables are exported
	// (bronze.<Source>.<schema>.<table>).
	Source string
	// Dir is the export directory.
	Dir string
	// Window is the length of a window: a whole number of seconds, at
	// least one.
	Window time.Duration
	// Format of the window files: jsonl (default), parquet or csv.
	Format string
	// Tables limits the export to these tables (empty: every table of
	// the source).
	Tables []change.TableID
	// Lateness is how far behind the checkpoint's commit time a window
	// must end to be final (default DefaultLateness).
	Lateness time.Duration
	// MaxBytes bounds the rows a step holds (default DefaultMaxBytes).
	MaxBytes int64
}

// Exporter writes windows of one source's bronze tables to a directory.
// It is not safe for concurrent use; one Exporter per directory at a time
// (Open takes a lock).
type Exporter struct {
	cat  lake.Catalog
	opts Options
	log  *slog.Logger
	lock *os.File
}

// TableResult is what a pass did for one table.
type TableResult struct {
	Table string `json:"table"`
	// CompleteThrough is the table's watermark after the pass: every
	// window ending at or before it is final (zero: none yet).
	CompleteThrough time.Time `json:"complete_through"`
	// Windows, Empty and LateRows count what this pass wrote: windows
	// with rows, empty markers, late rows.
	Windows  int   `json:"windows"`
	Empty    int   `json:"empty"`
	Rows     int64 `json:"rows"`
	LateRows int64 `json:"late_rows"`
	// Waiting says why the table did not advance ("" when it did or had
	// nothing new).
	Waiting string `json:"waiting,omitempty"`
}

// Open checks opts, takes the directory's lock and records (or checks)
// the export's settings. Close releases the lock.
func Open(cat lake.Catalog, opts Options, log *slog.Logger) (*Exporter, error) {
	if opts.Format == "" {
		opts.Format = FormatJSONL
	}
	if _, err := newFormat(opts.Format); err != nil {
		return nil, err
	}
	if opts.Window < time.Second || opts.Window%time.Second != 0 {
		return nil, fault.With(fault.ErrBadConfig, fmt.Sprintf("--window %s: give a whole number of seconds, at least 1s (e.g. 5m)", opts.Window), nil)
	}
	if opts.Lateness == 0 {
		opts.Lateness = DefaultLateness
	}
	if opts.Lateness < 0 {
		return nil, fault.With(fault.ErrBadConfig, fmt.Sprintf("--lateness %s must not be negative", opts.Lateness), nil)
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Dir == "" {
		return nil, fault.With(fault.ErrBadConfig, "--to: give the export directory", nil)
	}
	if strings.Contains(opts.Dir, "://") {
		// The export's files, watermarks and lock are local files (the lock
		// is an flock): an object store cannot hold them.
		return nil, fault.With(fault.ErrBadConfig, "--to: the export directory must be a local directory (an s3:// or other URL is not supported; sync the directory to object storage instead)", nil)
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("export: create %s: %w", opts.Dir, err)
	}
	lock, err := lockDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	e := &Exporter{cat: cat, opts: opts, log: log, lock: lock}
	if err := e.settings(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Close releases the directory's lock.
func (e *Exporter) Close() error {
	if e.lock == nil {
		return nil
	}
	err := e.lock.Close()
	e.lock = nil
	return err
}

// settings writes _export.json at the first run and refuses a run whose
// source, window or format differ from it: the windows already written
// would not match the new ones.
func (e *Exporter) settings() error {
	want := Settings{Source: e.opts.Source, Window: e.opts.Window.String(), Format: e.opts.Format}
	var have Settings
	ok, err := readJSON(filepath.Join(e.opts.Dir, settingsFile), &have)
	if err != nil {
		return err
	}
	if !ok {
		return writeJSON(e.opts.Dir, settingsFile, want)
	}
	if have != want {
		return fault.With(fault.ErrBadConfig, fmt.Sprintf(
			"export directory %s was written with source %s, window %s, format %s; this run asks for source %s, window %s, format %s: "+
				"use the same settings, or another directory", e.opts.Dir, have.Source, have.Window, have.Format, want.Source, want.Window, want.Format), nil)
	}
	return nil
}

// Follow runs a pass every `every` until ctx ends; a pass that fails with a
// transient error is retried at the next tick, any other error is returned.
func (e *Exporter) Follow(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := e.Pass(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if fault.ClassOf(err) != fault.Transient {
				return err
			}
			e.log.Warn("export pass failed; retrying at the next one", "error", err.Error())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass writes every window that became final since the last pass, for
// every table, then the export's _watermark.
func (e *Exporter) Pass(ctx context.Context) ([]TableResult, error) {
	cp, ok, err := bronze.LoadCheckpoint(ctx, e.cat, e.opts.Source)
	if err != nil {
		return nil, fmt.Errorf("export: read the checkpoint of %s: %w", e.opts.Source, err)
	}
	if !ok || cp.Watermark.IsZero() {
		e.log.Info("export: nothing captured yet", "source", e.opts.Source)
		return nil, e.writeRoot()
	}
	idents, err := e.tables(ctx)
	if err != nil {
		return nil, err
	}
	var out []TableResult
	for _, ident := range idents {
		r, err := e.table(ctx, ident, cp)
		if err != nil {
			return out, fmt.Errorf("export %s: %w", strings.Join(ident, "."), err)
		}
		if r.Windows+r.Empty > 0 || r.LateRows > 0 {
			e.log.Info("export progress", "table", r.Table, "complete_through", r.CompleteThrough.Format(time.RFC3339),
				"windows", r.Windows, "empty", r.Empty, "rows", r.Rows, "late_rows", r.LateRows)
		}
		if r.Waiting != "" {
			e.log.Info("export waiting", "table", r.Table, "reason", r.Waiting)
		}
		out = append(out, r)
	}
	return out, e.writeRoot()
}

// tables lists the source's bronze tables to export.
func (e *Exporter) tables(ctx context.Context) ([][]string, error) {
	nss, err := e.cat.ListNamespaces(ctx)
	if err != nil {
		return nil, err
	}
	var out [][]string
	for _, ns := range nss {
		if len(ns) != 3 || ns[0] != "bronze" || ns[1] != e.opts.Source {
			continue
		}
		ids, err := e.cat.ListTables(ctx, ns)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if len(id) == 4 && e.wanted(id) {
				out = append(out, id)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return strings.Join(out[i], ".") < strings.Join(out[j], ".") })
	if len(out) == 0 && len(e.opts.Tables) > 0 {
		return nil, fault.With(fault.ErrBadConfig, fmt.Sprintf("none of --tables has a bronze table in bronze.%s (tidemark status lists them)", e.opts.Source), nil)
	}
	return out, nil
}

func (e *Exporter) wanted(id []string) bool {
	if len(e.opts.Tables) == 0 {
		return true
	}
	for _, t := range e.opts.Tables {
		if t.Schema == id[2] && t.Name == id[3] {
			return true
		}
	}
	return false
}

// table runs the pass of one table: late rows first, then the windows
// that became final, in steps, each step ending with the table's
// _watermark.
func (e *Exporter) table(ctx context.Context, ident []string, cp pipeline.Checkpoint) (TableResult, error) {
	name := ident[2] + "." + ident[3]
	res := TableResult{Table: name}
	tbl, err := e.cat.Open(ctx, ident)
	if err != nil {
		return res, err
	}
	sub := dirName(ident[2], ident[3])
	dir := filepath.Join(e.opts.Dir, sub)
	var st TableState
	have, err := readJSON(filepath.Join(dir, watermarkFile), &st)
	if err != nil {
		return res, err
	}
	if have {
		res.CompleteThrough = st.CompleteThrough
	}
	sp, err := pipeline.ParseSnapshotState(tbl.Summary()[pipeline.PropSnapshot])
	if err != nil {
		return res, fault.With(fault.ErrCorruptState, fmt.Sprintf("table %s: unreadable %s", strings.Join(ident, "."), pipeline.PropSnapshot), err)
	}
	if sp.Status != pipeline.SnapshotDone && sp.Status != pipeline.SnapshotSkipped {
		res.Waiting = "its snapshot is " + sp.Status + ": windows become final once it is done"
		return res, nil
	}
	c := int64(cp.Pos)
	target := floorTime(cp.Watermark.Add(-e.opts.Lateness), e.opts.Window)
	if have && c <= st.CommitLSN && !target.After(st.CompleteThrough) {
		return res, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	f, err := newFormat(e.opts.Format)
	if err != nil {
		return res, err
	}
	if !have {
		origin, err := e.origin(ctx, tbl, target, c)
		if err != nil {
			return res, err
		}
		st = TableState{Table: name, Bronze: strings.Join(ident, "."), Dir: sub, FirstWindow: origin, CompleteThrough: origin, CommitLSN: c}
	}
	if err := cleanUnclaimed(dir, st); err != nil {
		return res, err
	}
	// Rows at or below the new commit position that reached bronze after
	// their window was claimed: never dropped, written beside it.
	if c > st.CommitLSN && st.CompleteThrough.After(st.FirstWindow) {
		n, err := e.late(ctx, tbl, dir, f, st, c)
		if err != nil {
			return res, err
		}
		if n > 0 {
			e.log.Warn("export: rows reached bronze after their window was final; written to late files beside it",
				"table", name, "rows", n, "commit_lsn", c)
		}
		res.LateRows = n
		st.LateRows += n
	}
	if c > st.CommitLSN {
		st.CommitLSN = c
	}
	from := st.CompleteThrough
	for from.Before(target) {
		n := min(int(target.Sub(from)/e.opts.Window), maxWindows)
		var w *windows
		for {
			w, err = e.collect(ctx, tbl, from, n, c, e.opts.MaxBytes)
			if errors.Is(err, errTooBig) && n > 1 {
				n /= 2
				continue
			}
			if errors.Is(err, errTooBig) {
				w, err = e.collect(ctx, tbl, from, 1, c, 0)
			}
			break
		}
		if err != nil {
			return res, err
		}
		for k := 0; k < n; k++ {
			start := from.Add(time.Duration(k) * e.opts.Window)
			rows, err := w.write(dir, windowName(start, e.opts.Window), f, k, "")
			if err != nil {
				w.release()
				return res, err
			}
			if rows == 0 {
				res.Empty++
			} else {
				res.Windows++
				res.Rows += rows
			}
		}
		w.release()
		from = from.Add(time.Duration(n) * e.opts.Window)
		st.CompleteThrough = from
		st.UpdatedAt = time.Now().UTC()
		if err := writeJSON(dir, watermarkFile, st); err != nil {
			return res, err
		}
		res.CompleteThrough = from
	}
	if res.LateRows > 0 || !have {
		// The new commit position (and the late files it names) is
		// claimed even when no window became final.
		st.UpdatedAt = time.Now().UTC()
		if err := writeJSON(dir, watermarkFile, st); err != nil {
			return res, err
		}
		res.CompleteThrough = st.CompleteThrough
	}
	return res, nil
}

// origin is the start of a table's first window: the window of its
// earliest row below target (at or below commit position c), or target
// when it has none.
func (e *Exporter) origin(ctx context.Context, tbl lake.Table, target time.Time, c int64) (time.Time, error) {
	first := int64(-1)
	err := tbl.ScanWhere(ctx, lake.And(lake.Less(bronze.ColTS, ts(target)), lake.Less(bronze.ColLSN, c+1)), func(rec arrow.RecordBatch) error {
		tc, lc, _, err := cols(rec)
		if err != nil {
			return err
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			t, l := int64(tc.Value(i)), lc.Value(i)
			if l > c || t >= target.UnixMicro() {
				continue
			}
			if first < 0 || t < first {
				first = t
			}
		}
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	if first < 0 {
		return target, nil
	}
	return floorTime(time.UnixMicro(first), e.opts.Window), nil
}

// late writes the rows with a commit time below the table's watermark and
// a commit position in (st.CommitLSN, c] to late files beside their
// windows, and returns how many there were.
func (e *Exporter) late(ctx context.Context, tbl lake.Table, dir string, f format, st TableState, c int64) (int64, error) {
	w := &windows{from: st.FirstWindow, window: e.opts.Window, n: int(st.CompleteThrough.Sub(st.FirstWindow) / e.opts.Window)}
	w.rows = make([][]rowRef, w.n)
	filter := lake.And(lake.Less(bronze.ColTS, ts(st.CompleteThrough)), lake.AtLeast(bronze.ColLSN, st.CommitLSN+1), lake.Less(bronze.ColLSN, c+1))
	defer w.release()
	err := tbl.ScanWhere(ctx, filter, func(rec arrow.RecordBatch) error {
		return w.add(rec, func(t, l int64) bool { return l > st.CommitLSN && l <= c })
	})
	if err != nil {
		return 0, err
	}
	var n int64
	for k := range w.rows {
		if len(w.rows[k]) == 0 {
			continue
		}
		start := w.from.Add(time.Duration(k) * w.window)
		rows, err := w.write(dir, windowName(start, w.window), f, k, fmt.Sprintf(".late-%d", c))
		if err != nil {
			return n, err
		}
		n += rows
	}
	return n, nil
}

// errTooBig: the rows of the windows asked for pass the byte bound.
var errTooBig = errors.New("export: the windows' rows pass the memory bound")

// collect reads the rows of the n windows from `from` at or below commit
// position c. With maxBytes > 0 it stops with errTooBig once the batches
// it holds pass maxBytes.
func (e *Exporter) collect(ctx context.Context, tbl lake.Table, from time.Time, n int, c int64, maxBytes int64) (*windows, error) {
	w := &windows{from: from, window: e.opts.Window, n: n, rows: make([][]rowRef, n)}
	to := from.Add(time.Duration(n) * e.opts.Window)
	filter := lake.And(lake.AtLeast(bronze.ColTS, ts(from)), lake.Less(bronze.ColTS, ts(to)), lake.Less(bronze.ColLSN, c+1))
	err := tbl.ScanWhere(ctx, filter, func(rec arrow.RecordBatch) error {
		if err := w.add(rec, func(_, l int64) bool { return l <= c }); err != nil {
			return err
		}
		if maxBytes > 0 && w.bytes > maxBytes {
			return errTooBig
		}
		return nil
	})
	if err != nil {
		w.release()
		return nil, err
	}
	return w, nil
}

// windows holds the rows of consecutive windows, by reference into the
// record batches they were read in.
type windows struct {
	from    time.Time
	window  time.Duration
	n       int
	rows    [][]rowRef // by window
	batches []arrow.RecordBatch
	bytes   int64
}

type rowRef struct {
	b, i     int32
	lsn, seq int64
}

// add keeps the rows of rec that fall in one of w's windows and pass keep.
func (w *windows) add(rec arrow.RecordBatch, keep func(ts, lsn int64) bool) error {
	tc, lc, sc, err := cols(rec)
	if err != nil {
		return err
	}
	lo, width := w.from.UnixMicro(), w.window.Microseconds()
	b := int32(len(w.batches))
	kept := false
	for i := 0; i < int(rec.NumRows()); i++ {
		if tc.IsNull(i) {
			return fmt.Errorf("a bronze row with no %s", bronze.ColTS)
		}
		t, l := int64(tc.Value(i)), lc.Value(i)
		if t < lo || !keep(t, l) {
			continue
		}
		k := (t - lo) / width
		if k >= int64(w.n) {
			continue
		}
		w.rows[k] = append(w.rows[k], rowRef{b: b, i: int32(i), lsn: l, seq: sc.Value(i)})
		kept = true
	}
	if kept {
		rec.Retain()
		w.batches = append(w.batches, rec)
		w.bytes += recordBytes(rec)
	}
	return nil
}

func (w *windows) release() {
	for _, b := range w.batches {
		b.Release()
	}
	w.batches = nil
}

// write writes window k as file base+suffix+ext (or, with no rows and no
// suffix, its empty marker), removing the other form a crashed pass may
// have left, and returns its rows.
func (w *windows) write(dir, base string, f format, k int, suffix string) (int64, error) {
	rows := w.rows[k]
	if len(rows) == 0 {
		if err := removeIfExists(filepath.Join(dir, base+f.ext())); err != nil {
			return 0, err
		}
		return 0, writeFile(dir, base+emptyExt, func(*os.File) error { return nil })
	}
	slices.SortFunc(rows, func(a, b rowRef) int {
		if a.lsn != b.lsn {
			return cmpInt(a.lsn, b.lsn)
		}
		return cmpInt(a.seq, b.seq)
	})
	if suffix == "" {
		if err := removeIfExists(filepath.Join(dir, base+emptyExt)); err != nil {
			return 0, err
		}
	}
	err := writeFile(dir, base+suffix+f.ext(), func(out *os.File) error {
		fw, err := f.open(out, w.batches[rows[0].b].Schema())
		if err != nil {
			return err
		}
		// Runs of rows that are consecutive in one batch go out as one
		// slice (bronze files hold rows in commit order: most are).
		for s := 0; s < len(rows); {
			e := s + 1
			for e < len(rows) && rows[e].b == rows[s].b && rows[e].i == rows[e-1].i+1 {
				e++
			}
			if err := fw.write(w.batches[rows[s].b], int(rows[s].i), int(rows[e-1].i)+1); err != nil {
				return err
			}
			s = e
		}
		return fw.close()
	})
	return int64(len(rows)), err
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// cols finds the position columns of a bronze batch.
func cols(rec arrow.RecordBatch) (*array.Timestamp, *array.Int64, *array.Int64, error) {
	find := func(name string) arrow.Array {
		if idx := rec.Schema().FieldIndices(name); len(idx) == 1 {
			return rec.Column(idx[0])
		}
		return nil
	}
	tc, ok1 := find(bronze.ColTS).(*array.Timestamp)
	lc, ok2 := find(bronze.ColLSN).(*array.Int64)
	sc, ok3 := find(bronze.ColSeq).(*array.Int64)
	if !ok1 || !ok2 || !ok3 {
		return nil, nil, nil, fmt.Errorf("not a bronze table: no %s, %s and %s columns", bronze.ColTS, bronze.ColLSN, bronze.ColSeq)
	}
	return tc, lc, sc, nil
}

// ts is t as a filter value of a timestamp column (µs).
func ts(t time.Time) arrow.Timestamp { return arrow.Timestamp(t.UnixMicro()) }

// floorTime is the start of the window (aligned to the Unix epoch) that
// holds t.
func floorTime(t time.Time, window time.Duration) time.Time {
	us, w := t.UnixMicro(), window.Microseconds()
	s := us / w * w
	if us < 0 && us%w != 0 {
		s -= w
	}
	return time.UnixMicro(s).UTC()
}

// recordBytes is the size of rec's buffers.
func recordBytes(rec arrow.RecordBatch) int64 {
	var n int64
	var data func(d arrow.ArrayData)
	data = func(d arrow.ArrayData) {
		for _, b := range d.Buffers() {
			if b != nil {
				n += int64(b.Len())
			}
		}
		for _, c := range d.Children() {
			data(c)
		}
	}
	for _, c := range rec.Columns() {
		data(c.Data())
	}
	return n
}
