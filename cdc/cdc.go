package cdc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/event"
)

// Config says what a Stream reads and when it stops.
type Config struct {
	// Source is the connection URL: postgres://user:password@host:5432/db
	// (or a PostgreSQL key=value string), mysql://user:password@host:3306/db.
	Source string
	// Name names the pipeline whose publication (tidemark_<name>) the
	// stream reads on PostgreSQL; default: the database's name. A missing
	// publication is created FOR ALL TABLES (which needs a superuser).
	Name string
	// Tables limits the events to these "schema.table" names (MySQL:
	// "table" or "database.table"); empty: every table, and logical
	// messages.
	Tables []string
	// MaxRecords stops the stream after this many events (0: no limit).
	MaxRecords int
	// MaxRuntime stops the stream this long after Open (0: no limit),
	// even while Next waits.
	MaxRuntime time.Duration
	// PollTimeout stops the stream once this long passes without an event
	// (0: never).
	PollTimeout time.Duration
	// Format is the shape of Event.JSON: "tidemark" (default), "debezium"
	// or "beam" (docs/tail.md).
	Format string
	// Logger receives tidemark's logs, scrubbed of secrets; nil discards
	// them.
	Logger *slog.Logger
	// PositionName makes the stream resumable: a durable named position
	// (PostgreSQL: its own slot and a checkpoint file in PositionDir;
	// MySQL/MariaDB: the file, holding the binlog position and GTID set),
	// so that the next Open with the name continues after the last
	// acknowledged event (position.go has the contract). Empty: ephemeral.
	PositionName string
	PositionDir  string
	// Snapshot (PostgreSQL) first delivers the existing rows of the
	// published tables as Snapshot events (snapshot.go has the contract).
	Snapshot bool
	// SnapshotChunkRows is the most rows a snapshot chunk reads (0: the
	// pipeline's default, 100000).
	SnapshotChunkRows int
}

// Op is the kind of an event.
type Op string

// The kinds of events.
const (
	Insert   Op = "c"
	Update   Op = "u"
	Delete   Op = "d"
	Truncate Op = "t"
	// Message is a logical decoding message (pg_logical_emit_message).
	Message Op = "m"
)

// Table names a source table (schema and name).
type Table = change.TableID

// Position is an event's place in the source's stream: the commit
// position of its transaction (PostgreSQL: the commit LSN; MySQL: binlog
// file number << 32 | offset), then its sequence number in it (Seq).
// Position.Less orders two positions.
type Position = change.Position

// Event is one change. Row values are Go values: int32, int64, float32,
// float64, bool, string, []byte, a decimal as its exact text ("10.50"),
// a date or timestamp as time.Time (UTC), a time of day as
// time.Duration since midnight, an array as []any; nil is SQL NULL.
type Event struct {
	Op    Op
	Table Table // empty for a message
	// Key names the table's key columns.
	Key []string
	// Before is the old row when the source sent one (a delete's key; the
	// whole row with REPLICA IDENTITY FULL); After the new row (nil for a
	// delete or truncate).
	Before, After map[string]any
	// Unchanged names columns the source did not send (unchanged TOAST):
	// their After value is nil and is not NULL.
	Unchanged []string
	Position  Position
	TxID      int64
	// CommitTime is when the source committed the event's transaction.
	CommitTime time.Time
	// Prefix and Content are a message's (Op Message).
	Prefix  string
	Content []byte
	// Error is set for a row tidemark could not decode exactly (a
	// dead-letter row): Raw is the row as the source sent it.
	Error, Raw string
	// JSON is the event in Config.Format.
	JSON []byte

	n int64 // its number in the session, for Ack
}

// Stream delivers a source's events. Next and Ack may be called from one
// goroutine at a time; Close from any.
type Stream struct {
	events chan Event
	done   chan struct{}
	err    error // the stream's end, set before done closes
	cancel context.CancelFunc

	mu    sync.Mutex
	acked Position
	acks  acks
}

// Open starts reading cfg.Source and returns once the stream is open:
// every change committed after Open returns is delivered.
func Open(ctx context.Context, cfg Config) (*Stream, error) {
	shape, err := event.ParseShape(cfg.Format)
	if cfg.Format == "" {
		shape, err = event.Tidemark, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cdc: %w", err)
	}
	if cfg.MaxRecords < 0 || cfg.MaxRuntime < 0 || cfg.PollTimeout < 0 {
		return nil, errors.New("cdc: MaxRecords, MaxRuntime and PollTimeout must not be negative")
	}
	if cfg.PositionName != "" {
		if err := checkPosition(cfg); err != nil {
			return nil, err
		}
	}
	c := &config.Config{Source: config.NewSecret(cfg.Source), Name: cfg.Name, Tables: cfg.Tables}
	c.Snapshot.ChunkRows = cfg.SnapshotChunkRows
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("cdc: %w", config.RedactError(err, c.Secrets()...))
	}
	h := slog.Handler(discard{})
	if cfg.Logger != nil {
		h = cfg.Logger.Handler()
	}
	log := app.TailLogger(h, c)
	sctx, cancel := context.WithCancel(ctx)
	s := &Stream{events: make(chan Event), done: make(chan struct{}), cancel: cancel}
	s.acks.changed = make(chan struct{})
	ready := make(chan struct{})
	var once sync.Once
	opts := app.TailOptions{MaxRecords: cfg.MaxRecords, MaxDuration: cfg.MaxRuntime, PollTimeout: cfg.PollTimeout,
		Format: shape, Snapshot: cfg.Snapshot, Ready: func() { once.Do(func() { close(ready) }) }}
	if cfg.PositionName != "" {
		opts.Slot = app.PositionSlot(cfg.PositionName)
		opts.Store = &app.TailFileStore{Path: positionFile(cfg.PositionDir, cfg.PositionName), Wait: s.waitAcked}
	}
	go func() {
		s.err = app.TailTo(sctx, c, opts, s.deliver, log)
		close(s.done)
	}()
	select {
	case <-ready:
		return s, nil
	case <-s.done:
		cancel()
		if s.err == nil {
			s.err = errors.New("the stream ended before it opened")
		}
		return nil, fmt.Errorf("cdc: open %s: %w", config.RedactURL(cfg.Source), s.err)
	case <-ctx.Done():
		cancel()
		<-s.done
		return nil, ctx.Err()
	}
}

// deliver hands one record to Next, from the stream's goroutine.
func (s *Stream) deliver(ctx context.Context, r app.TailRecord) error {
	ev := toEvent(r)
	s.mu.Lock()
	ev.n = s.acks.delivered + 1
	s.mu.Unlock()
	select {
	case s.events <- ev:
		s.mu.Lock()
		s.acks.delivered = ev.n
		s.mu.Unlock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Next returns the next event, waiting for one. It returns io.EOF once the
// stream has ended by MaxRecords, MaxRuntime, PollTimeout or Open's
// context, the stream's error if it failed, and ctx's error if ctx ends
// first (the stream goes on).
func (s *Stream) Next(ctx context.Context) (Event, error) {
	select {
	case ev := <-s.events:
		return ev, nil
	case <-s.done:
		select { // an event handed over as the stream ended
		case ev := <-s.events:
			return ev, nil
		default:
		}
		if s.err != nil {
			return Event{}, fmt.Errorf("cdc: %w", s.err)
		}
		return Event{}, io.EOF
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

// Ack records that the program is done with ev and with every event
// before it. Ephemeral, nothing is stored (Acked reports it); with a
// named position the next checkpoint saved covers it.
func (s *Stream) Ack(ev Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.n <= s.acks.acked {
		return fmt.Errorf("cdc: ack of position %d:%d after %d:%d: acknowledge each event once, in order", ev.Position.LSN, ev.Position.Seq, s.acked.LSN, s.acked.Seq)
	}
	s.acked, s.acks.acked = ev.Position, ev.n
	close(s.acks.changed)
	s.acks.changed = make(chan struct{})
	return nil
}

// Acked is the position of the last acknowledged event.
func (s *Stream) Acked() Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acked
}

// Close stops the stream (dropping its temporary slot) and waits for it.
func (s *Stream) Close() error {
	s.cancel()
	<-s.done
	return nil
}

func toEvent(r app.TailRecord) Event {
	ev := Event{JSON: r.JSON}
	switch {
	case r.Change != nil:
		c := r.Change
		ev.Op, ev.Table, ev.Position, ev.TxID, ev.CommitTime = Op(c.Op.String()), Table(c.Table), Position(c.Pos), c.TxID, c.CommitTime
		ev.Unchanged = c.Unchanged
		if c.Schema != nil {
			ev.Key = c.Schema.Key
		}
		if c.Op != change.OpDelete && c.Op != change.OpTruncate {
			ev.After = rowMap(c.Schema, c.Values)
		}
		if c.Before != nil {
			ev.Before = rowMap(c.Schema, c.Before)
		} else if c.Op == change.OpDelete {
			ev.Before = rowMap(c.Schema, c.Values)
		}
	case r.DeadLetter != nil:
		d := r.DeadLetter
		ev.Op, ev.Table, ev.Position, ev.TxID, ev.CommitTime = Op(d.Op.String()), Table(d.Table), Position(d.Pos), d.TxID, d.CommitTime
		ev.Error, ev.Raw = d.Error, d.Raw
	case r.Message != nil:
		m := r.Message
		ev.Op, ev.Position, ev.TxID, ev.CommitTime = Message, Position(m.Pos), m.TxID, m.CommitTime
		ev.Prefix, ev.Content = m.Prefix, m.Content
	}
	return ev
}

func rowMap(s *change.Schema, vals []any) map[string]any {
	if s == nil {
		return nil
	}
	m := make(map[string]any, len(vals))
	for i, f := range s.Fields {
		if i < len(vals) {
			m[f.Name] = goValue(vals[i], f.Type)
		}
	}
	return m
}

// goValue turns a lake value into the Go value Event documents.
func goValue(v any, t iceberg.Type) any {
	switch x := v.(type) {
	case decimal128.Num:
		return event.JSONValue(x, t)
	case arrow.Date32:
		return x.ToTime()
	case arrow.Time64:
		return time.Duration(x) * time.Microsecond
	case arrow.Timestamp:
		return time.UnixMicro(int64(x)).UTC()
	case []any:
		var et iceberg.Type
		if lt, ok := t.(*iceberg.ListType); ok {
			et = lt.Element
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = goValue(e, et)
		}
		return out
	}
	return v
}

// discard is a slog.Handler that drops everything.
type discard struct{}

func (discard) Enabled(context.Context, slog.Level) bool  { return false }
func (discard) Handle(context.Context, slog.Record) error { return nil }
func (d discard) WithAttrs([]slog.Attr) slog.Handler      { return d }
func (d discard) WithGroup(string) slog.Handler           { return d }

// dropSlot drops the replication slot if it exists.
func dropSlot(ctx context.Context, source, slot string) error {
	conn, err := pgx.Connect(ctx, source)
	if err != nil {
		return fmt.Errorf("cdc: drop position: %s", config.RedactURL(config.RedactError(err, config.NewSecret(source)).Error()))
	}
	defer conn.Close(context.Background())
	// A consumer that has just stopped may still hold the slot until
	// PostgreSQL notices its connection is gone: wait for that a while.
	deadline := time.Now().Add(dropSlotWait)
	for {
		_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			if err != nil {
				return fmt.Errorf("cdc: drop position %s: %w", slot, err)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cdc: drop position %s: a consumer still holds it after %s (%w): stop the process reading this position first", slot, dropSlotWait, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// dropSlotWait is how long DropPosition waits for a slot in use to be
// released.
const dropSlotWait = 15 * time.Second
