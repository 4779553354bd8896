package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
	if opts.MaxDuration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.MaxDuration)
		defer cancel()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	bw := bufio.NewWriter(out)
	defer bw.Flush()
	tw := &tailWriter{out: bw, max: opts.MaxRecords, only: map[change.TableID]bool{}, log: log,
		opts: event.Options{Shape: opts.Format, Schema: opts.DebeziumSchema, Connector: src.connector, Name: cfg.Name, Version: opts.Version}}
	tw.last.Store(time.Now().UnixNano())
	if opts.PollTimeout > 0 {
		go tw.idle(ctx, opts.PollTimeout, cancel)
	}
	err = src.tail(ctx, cfg, tw, log)
	if errors.Is(err, errTailDone) || (err == nil) || (ctx.Err() != nil && errors.Is(err, context.Canceled)) {
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
	var db string
	if pc, err := pgx.ParseConfig(cfg.Source.Reveal()); err == nil { // NewDialer parsed it
		db = pc.Database
	}
	if err := tw.open(db, ""); err != nil {
		return err
	}
	for _, t := range copts.Tables {
		tw.only[t] = true
	}
	copts.Slot = fmt.Sprintf("tidemark_tail_%d_%d", os.Getpid(), time.Now().UnixNano()%1000000)
	copts.TemporarySlot = true
	copts.Tables = nil // never alter the publication from tail
	copts.Snapshot.Enabled = false
	copts.HeartbeatInterval = 0
	copts.PublicationPoll = 0
	copts.CommitInterval = 200 * time.Millisecond
	copts.SpoolDir = filepath.Join(os.TempDir(), copts.Slot)
	defer os.RemoveAll(copts.SpoolDir)
	capt := postgres.New(dialer, tw, copts, log)
	defer capt.Close()
	return capt.Run(ctx)
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
	// last is when the last record was printed (or the tail started),
	// in Unix nanoseconds, for the poll timeout.
	last atomic.Int64
}

var _ pipeline.Sink = (*tailWriter)(nil)

// open builds the encoder once the source's tail knows its database and
// (MySQL) binlog basename.
func (t *tailWriter) open(database, binlogBase string) error {
	o := t.opts
	o.Database, o.BinlogBase = database, binlogBase
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
		if wait <= 0 {
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

func (t *tailWriter) OpenTable(context.Context, change.TableID, *change.Schema) (pipeline.TableState, error) {
	return pipeline.TableState{}, nil
}

func (t *tailWriter) emit(b []byte, err error) error {
	if err != nil {
		return err
	}
	t.out.Write(b)
	t.out.WriteByte('\n')
	t.last.Store(time.Now().UnixNano())
	t.n++
	if t.max > 0 && t.n >= t.max {
		t.out.Flush()
		return errTailDone
	}
	return nil
}

func (t *tailWriter) want(id change.TableID) bool { return len(t.only) == 0 || t.only[id] }

func (t *tailWriter) Write(_ context.Context, c *change.Change) error {
	if !t.want(c.Table) {
		return nil
	}
	return t.emit(t.enc.Change(c))
}

func (t *tailWriter) WriteBatch(ctx context.Context, _ change.TableID, cs []*change.Change, _ map[string]string) error {
	for _, c := range cs {
		if err := t.Write(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

func (t *tailWriter) DeadLetter(_ context.Context, d change.DeadLetter) error {
	if !t.want(d.Table) {
		return nil
	}
	t.log.Warn("tail: a row could not be decoded exactly; it is printed with its error and raw text",
		"table", d.Table.String(), "position", d.Pos.String(), "error", d.Error)
	return t.emit(t.enc.DeadLetter(d))
}

func (t *tailWriter) Message(_ context.Context, m change.Message) error {
	if len(t.only) > 0 {
		return nil
	}
	return t.emit(t.enc.Message(m))
}

func (t *tailWriter) Buffered() int64 { return 0 }

func (t *tailWriter) Flush(context.Context, pipeline.Checkpoint) error { return t.out.Flush() }

func (t *tailWriter) LoadCheckpoint(context.Context) (pipeline.Checkpoint, bool, error) {
	return pipeline.Checkpoint{}, false, nil
}
