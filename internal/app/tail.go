package app

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/event"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres"
)

// TailOptions bound a tail session and choose its output.
type TailOptions struct {
	MaxRecords  int           // stop after this many records (0: no limit)
	MaxDuration time.Duration // stop after this long (0: no limit)
	// PollTimeout stops the tail once this long has passed without a
	// record printed, counted from the start and then from the last
	// record (0: never).
	PollTimeout time.Duration
	// Format is the event shape (event.Tidemark when empty).
	Format event.Shape
	// DebeziumSchema: the debezium shape's {"schema","payload"} form.
	DebeziumSchema bool
	// Version is the tidemark version the Debezium and Beam shapes carry.
	Version string
	// Ready, if set, is called once the stream is open: every change
	// committed after it is delivered (PostgreSQL: the temporary slot is
	// active; MySQL: the capture has recorded its start position, or a
	// named position's was loaded).
	Ready func()
	// Slot, if set, names a durable position: PostgreSQL reads this
	// replication slot instead of a temporary one, MySQL registers with a
	// server id derived from it; the stream resumes from Store's
	// checkpoint, and (PostgreSQL) the slot's confirmed position advances
	// only past checkpoints Store has saved. Needs Store.
	Slot  string
	Store TailStore
	// Snapshot first reads the published tables' existing
	// rows through the capture's chunked, watermark-reconciled snapshot,
	// while the stream runs: they come as op "r" records carrying the
	// position of the watermark their chunk was reconciled at. The
	// progress is kept in memory only: each run snapshots from scratch.
	Snapshot bool
}

// ErrSnapshotMySQL was TailOptions.Snapshot's error on a MySQL source,
// before MySQL snapshots were supported; it is no longer returned.
var ErrSnapshotMySQL = errors.New("snapshot not supported for mysql sources in cdc yet")

// TailStore keeps a durable tail's checkpoint (TailOptions.Slot).
type TailStore interface {
	// Load returns the saved checkpoint (ok false: none yet).
	Load(ctx context.Context) (cp pipeline.Checkpoint, ok bool, err error)
	// Save makes cp durable, once the consumer is done with every record
	// handed over before it (it may wait for that). Returning nil lets the
	// source forget everything up to cp. When stopping is closed (the
	// tail is ending) and records are still unacknowledged, it returns
	// ErrUnacked without saving: they come again in the next session.
	Save(ctx context.Context, stopping <-chan struct{}, cp pipeline.Checkpoint) error
}

// TailFileStore is a TailStore in a file: the checkpoint as JSON, replaced
// atomically (write, fsync, rename, fsync of the directory) at each Save.
type TailFileStore struct {
	Path string
	// Wait, if set, is called first by Save and must return once every
	// record handed over is acknowledged, or ErrUnacked when stopping
	// closes first.
	Wait func(ctx context.Context, stopping <-chan struct{}) error
}

var _ TailStore = (*TailFileStore)(nil)

// Load reads the checkpoint; none when the file does not exist.
func (f *TailFileStore) Load(context.Context) (pipeline.Checkpoint, bool, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return pipeline.Checkpoint{}, false, nil
	}
	if err != nil {
		return pipeline.Checkpoint{}, false, fmt.Errorf("read position file: %w", err)
	}
	var cp pipeline.Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return pipeline.Checkpoint{}, false, fault.With(fault.ErrBadConfig, "position file "+f.Path+" is damaged (remove it and drop its slot to start over)", err)
	}
	return cp, true, nil
}

// Save waits (Wait), then replaces the file with cp.
func (f *TailFileStore) Save(ctx context.Context, stopping <-chan struct{}, cp pipeline.Checkpoint) error {
	if f.Wait != nil {
		if err := f.Wait(ctx, stopping); err != nil {
			return err
		}
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
		return fmt.Errorf("save position: %w", err)
	}
	tmp := f.Path + ".tmp"
	w, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("save position: %w", err)
	}
	_, err = w.Write(b)
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, f.Path)
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(filepath.Dir(f.Path)); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("save position: %w", err)
	}
	return nil
}

// PositionSlot is the durable slot of the named position name.
func PositionSlot(name string) string { return "tidemark_pos_" + name }

var positionName = regexp.MustCompile(`^[a-z0-9_]{1,40}$`)

// CheckPositionName checks a position's name: 1 to 40 of a-z, 0-9, _.
func CheckPositionName(name string) error {
	if !positionName.MatchString(name) {
		return fmt.Errorf("position name %q: want 1 to 40 of a-z, 0-9, _", name)
	}
	return nil
}

// ErrUnacked is TailStore.Save's error when a tail ends with records not
// yet acknowledged; the tail then ends without error.
var ErrUnacked = errors.New("tail: records not acknowledged at the end")

// TailRecord is one record of a tail: exactly one of Change, DeadLetter
// and Message is set, and JSON is it in the tail's format.
type TailRecord struct {
	Change     *change.Change
	DeadLetter *change.DeadLetter
	Message    *change.Message
	JSON       []byte
}

var errTailDone = errors.New("tail: limit reached")

// errTailIdle ends a tail whose PollTimeout passed without a record.
var errTailIdle = errors.New("tail: poll timeout without a record")

// Tail streams the source's changes as JSON lines (internal/event, in
// opts.Format) to out, from the source's current position, storing
// nothing: PostgreSQL through a temporary slot of its own, MySQL/MariaDB
// through a binlog dump under a server id of its own. The pipeline's slot,
// position and lake are never touched. It returns nil when a limit
// (MaxRecords, MaxDuration, PollTimeout) or ctx ends it.
func Tail(ctx context.Context, cfg *config.Config, opts TailOptions, out io.Writer, log *slog.Logger) error {
	bw := bufio.NewWriter(out)
	defer bw.Flush()
	return tail(ctx, cfg, opts, &tailWriter{out: bw}, log)
}

// TailTo is Tail handing each record to handle instead of printing it,
// from the source's stream goroutine. handle may block, holding the
// stream back; it must return once ctx is done, with ctx's error. An
// error from handle ends the tail with that error. The records stop
// counting against MaxRecords and PollTimeout only once handle returns:
// a record waiting in handle is never cut off by PollTimeout.
func TailTo(ctx context.Context, cfg *config.Config, opts TailOptions, handle func(context.Context, TailRecord) error, log *slog.Logger) error {
	return tail(ctx, cfg, opts, &tailWriter{handle: handle}, log)
}

// TailLogger is a logger writing to h that scrubs cfg's secrets and any
// connection string's password from every message and attribute, as
// tidemark's own logs do.
func TailLogger(h slog.Handler, cfg *config.Config) *slog.Logger {
	return slog.New(&redactHandler{h: h, secrets: cfg.Secrets()})
}

func tail(ctx context.Context, cfg *config.Config, opts TailOptions, tw *tailWriter, log *slog.Logger) error {
	src, err := sourceFor(cfg.Source.Reveal())
	if err != nil {
		return err
	}
	if opts.Format == "" {
		opts.Format = event.Tidemark
	}
	if _, err := event.ParseShape(string(opts.Format)); err != nil {
		return fault.With(fault.ErrBadConfig, err.Error(), err)
	}
	if (opts.Slot == "") != (opts.Store == nil) {
		return fault.With(fault.ErrBadConfig, "tail: a durable slot needs a checkpoint store, and a store a slot", nil)
	}
	if opts.MaxDuration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.MaxDuration)
		defer cancel()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tw.max, tw.only, tw.log, tw.ready = opts.MaxRecords, map[change.TableID]bool{}, log, opts.Ready
	tw.slot, tw.store, tw.stopping = opts.Slot, opts.Store, ctx.Done()
	tw.snapshot, tw.props = opts.Snapshot, map[change.TableID]map[string]string{}
	tw.opts = event.Options{Shape: opts.Format, Schema: opts.DebeziumSchema, Connector: src.connector, Name: cfg.Name, Version: opts.Version}
	tw.last.Store(time.Now().UnixNano())
	if opts.PollTimeout > 0 {
		go tw.idle(ctx, opts.PollTimeout, cancel)
	}
	err = src.tail(ctx, cfg, tw, log)
	if errors.Is(err, errTailDone) || errors.Is(err, ErrUnacked) || (err == nil) || (ctx.Err() != nil && errors.Is(err, context.Canceled)) {
		return nil
	}
	if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return config.RedactError(err, cfg.Secrets()...)
}

// tailPostgres is the postgres source's tail: a capture through a
// temporary slot, without snapshot, heartbeats or publication changes.
func tailPostgres(ctx context.Context, cfg *config.Config, tw *tailWriter, log *slog.Logger) error {
	dialer, err := postgres.NewDialer(cfg.Source.Reveal(), config.RedactURL)
	if err != nil {
		return err
	}
	copts, err := captureOptions(cfg)
	if err != nil {
		return err
	}
	if err := tw.open(dialer.Database(), nil); err != nil {
		return err
	}
	for _, t := range copts.Tables {
		tw.only[t] = true
	}
	copts.Slot = fmt.Sprintf("tidemark_tail_%d_%d", os.Getpid(), time.Now().UnixNano()%1000000)
	copts.TemporarySlot = true
	if tw.slot != "" {
		copts.Slot, copts.TemporarySlot = tw.slot, false
	}
	copts.Tables = nil // never alter the publication from tail
	copts.Snapshot.Enabled, copts.Snapshot.DropChanged = tw.snapshot, true
	copts.HeartbeatInterval = 0
	copts.PublicationPoll = 0
	copts.CommitInterval = 200 * time.Millisecond
	copts.SpoolDir = filepath.Join(os.TempDir(), copts.Slot)
	defer os.RemoveAll(copts.SpoolDir)
	capt := postgres.New(dialer, tw, copts, log)
	defer capt.Close()
	if tw.ready != nil {
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		go awaitSlot(rctx, dialer, copts.Slot, tw.ready, log)
	}
	return capt.Run(ctx)
}

// awaitSlot calls ready once slot is active (the capture streams from it),
// until ctx is done.
func awaitSlot(ctx context.Context, dialer *postgres.Dialer, slot string, ready func(), log *slog.Logger) {
	conn, err := dialer.Connect(ctx)
	if err != nil {
		log.Debug("tail: cannot watch for the temporary slot", "error", err)
		return
	}
	defer conn.Close(context.Background())
	for {
		var active bool
		err := conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
		if err == nil && active {
			ready()
			return
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			log.Debug("tail: cannot watch for the temporary slot", "error", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// tailWriter prints changes instead of storing them, one JSON line each.
type tailWriter struct {
	out  *bufio.Writer
	max  int
	n    int
	only map[change.TableID]bool
	log  *slog.Logger
	// opts are the encoder's options but the source's own (database,
	// binlog basename), which the source's tail gives to open.
	opts event.Options
	enc  *event.Encoder
	// handle, if set, takes the records instead of out (TailTo).
	handle func(context.Context, TailRecord) error
	// ready is TailOptions.Ready; with readyOnFlush it is called at the
	// first Flush (MySQL: the capture's recorded start point).
	ready        func()
	readyOnFlush bool
	// slot and store are TailOptions'; stopping is closed when the tail
	// is ending.
	slot     string
	store    TailStore
	stopping <-chan struct{}
	// last is when the last record was printed (or the tail started),
	// in Unix nanoseconds, for the poll timeout; busy is set while handle
	// holds a record.
	last atomic.Int64
	busy atomic.Bool
	// snapshot is TailOptions.Snapshot; props are each table's tidemark.*
	// state (snapshot progress) as the capture last wrote it, this run.
	snapshot bool
	props    map[change.TableID]map[string]string
}

var _ pipeline.Sink = (*tailWriter)(nil)

// open builds the encoder once the source's tail knows its database and
// (MySQL) binlog basename.
func (t *tailWriter) open(database string, binlog func(lsn uint64) (string, uint32)) error {
	o := t.opts
	o.Database, o.Binlog = database, binlog
	enc, err := event.NewEncoder(o)
	if err != nil {
		return err
	}
	t.enc = enc
	return nil
}

// idle cancels the tail with errTailIdle once timeout passes without a
// record, until ctx ends.
func (t *tailWriter) idle(ctx context.Context, timeout time.Duration, cancel context.CancelCauseFunc) {
	for {
		wait := time.Until(time.Unix(0, t.last.Load()).Add(timeout))
		if t.busy.Load() {
			wait = timeout
		} else if wait <= 0 {
			cancel(errTailIdle)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (t *tailWriter) OpenTable(_ context.Context, id change.TableID, _ *change.Schema) (pipeline.TableState, error) {
	st := pipeline.TableState{Props: map[string]string{}}
	for k, v := range t.props[id] {
		st.Props[k] = v
	}
	return st, nil
}

func (t *tailWriter) emit(ctx context.Context, r TailRecord, err error) error {
	if err != nil {
		return err
	}
	if t.handle != nil {
		t.busy.Store(true)
		err := t.handle(ctx, r)
		t.last.Store(time.Now().UnixNano())
		t.busy.Store(false)
		if err != nil {
			return err
		}
	} else {
		t.out.Write(r.JSON)
		t.out.WriteByte('\n')
	}
	t.last.Store(time.Now().UnixNano())
	t.n++
	if t.max > 0 && t.n >= t.max {
		if t.out != nil {
			t.out.Flush()
		}
		return errTailDone
	}
	return nil
}

func (t *tailWriter) want(id change.TableID) bool { return len(t.only) == 0 || t.only[id] }

func (t *tailWriter) Write(ctx context.Context, c *change.Change) error {
	if !t.want(c.Table) {
		return nil
	}
	b, err := t.enc.Change(c)
	return t.emit(ctx, TailRecord{Change: c, JSON: b}, err)
}

func (t *tailWriter) WriteBatch(ctx context.Context, id change.TableID, cs []*change.Change, props map[string]string) error {
	for _, c := range cs {
		if err := t.Write(ctx, c); err != nil {
			return err
		}
	}
	if len(props) > 0 {
		m := t.props[id]
		if m == nil {
			m = map[string]string{}
			t.props[id] = m
		}
		for k, v := range props {
			m[k] = v
		}
	}
	return nil
}

func (t *tailWriter) DeadLetter(ctx context.Context, d change.DeadLetter) error {
	if !t.want(d.Table) {
		return nil
	}
	t.log.Warn("tail: a row could not be decoded exactly; it is printed with its error and raw text",
		"table", d.Table.String(), "position", d.Pos.String(), "error", d.Error)
	b, err := t.enc.DeadLetter(d)
	return t.emit(ctx, TailRecord{DeadLetter: &d, JSON: b}, err)
}

func (t *tailWriter) Message(ctx context.Context, m change.Message) error {
	if len(t.only) > 0 {
		return nil
	}
	b, err := t.enc.Message(m)
	return t.emit(ctx, TailRecord{Message: &m, JSON: b}, err)
}

func (t *tailWriter) Buffered() int64 { return 0 }

func (t *tailWriter) Flush(ctx context.Context, cp pipeline.Checkpoint) error {
	if t.out != nil {
		// Printed before saved: what the position passes is out.
		if err := t.out.Flush(); err != nil {
			return err
		}
	}
	if t.store != nil {
		if err := t.store.Save(ctx, t.stopping, cp); err != nil {
			return err
		}
	}
	if t.readyOnFlush && t.ready != nil {
		t.ready()
		t.ready = nil
	}
	return nil
}

func (t *tailWriter) LoadCheckpoint(ctx context.Context) (pipeline.Checkpoint, bool, error) {
	if t.store != nil {
		return t.store.Load(ctx)
	}
	return pipeline.Checkpoint{}, false, nil
}
