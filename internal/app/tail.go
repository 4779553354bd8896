package app

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres"
)

// TailOptions bound a tail session.
type TailOptions struct {
	MaxRecords  int           // stop after this many records (0: no limit)
	MaxDuration time.Duration // stop after this long (0: no limit)
}

var errTailDone = errors.New("tail: limit reached")

// Tail streams the source's changes as JSON lines (a Debezium-style
// envelope) to out, from the source's current position, storing nothing:
// PostgreSQL through a temporary slot of its own, MySQL/MariaDB through a
// binlog dump under a server id of its own. The pipeline's slot, position
// and lake are never touched.
func Tail(ctx context.Context, cfg *config.Config, opts TailOptions, out io.Writer, log *slog.Logger) error {
	src, err := sourceFor(cfg.Source.Reveal())
	if err != nil {
		return err
	}
	if opts.MaxDuration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.MaxDuration)
		defer cancel()
	}
	bw := bufio.NewWriter(out)
	defer bw.Flush()
	tw := &tailWriter{out: bw, max: opts.MaxRecords, only: map[change.TableID]bool{}, connector: src.connector}
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

// tailWriter prints changes instead of storing them.
type tailWriter struct {
	out  *bufio.Writer
	max  int
	n    int
	only map[change.TableID]bool
	// connector names the source in each envelope (postgresql, mysql).
	connector string
}

var _ pipeline.Sink = (*tailWriter)(nil)

func (t *tailWriter) OpenTable(context.Context, change.TableID, *change.Schema) (pipeline.TableState, error) {
	return pipeline.TableState{}, nil
}

type envelope struct {
	Before    map[string]any `json:"before"`
	After     map[string]any `json:"after"`
	Source    tailSource     `json:"source"`
	Op        string         `json:"op"`
	TSMs      int64          `json:"ts_ms"`
	Error     string         `json:"error,omitempty"`
	Raw       string         `json:"raw,omitempty"`
	Unchanged []string       `json:"unchanged,omitempty"`
	Message   *tailMessage   `json:"message,omitempty"`
}

type tailSource struct {
	Connector string `json:"connector"`
	Schema    string `json:"schema,omitempty"`
	Table     string `json:"table,omitempty"`
	LSN       uint64 `json:"lsn"`
	Seq       int64  `json:"seq"`
	TxID      int64  `json:"txId"`
	TSMs      int64  `json:"ts_ms"`
}

type tailMessage struct {
	Prefix  string `json:"prefix"`
	Content string `json:"content"`
}

func (t *tailWriter) emit(e envelope) error {
	e.TSMs = time.Now().UnixMilli()
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	t.out.Write(b)
	t.out.WriteByte('\n')
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
	e := envelope{Op: c.Op.String(), Unchanged: c.Unchanged,
		Source: tailSource{Connector: t.connector, Schema: c.Table.Schema, Table: c.Table.Name, LSN: c.Pos.LSN, Seq: c.Pos.Seq, TxID: c.TxID, TSMs: c.CommitTime.UnixMilli()}}
	if c.Op != change.OpDelete && c.Op != change.OpTruncate {
		e.After = rowJSON(c.Schema, c.Values)
	}
	if c.Before != nil {
		e.Before = rowJSON(c.Schema, c.Before)
	}
	return t.emit(e)
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
	return t.emit(envelope{Op: d.Op.String(), Error: d.Error, Raw: d.Raw,
		Source: tailSource{Connector: t.connector, Schema: d.Table.Schema, Table: d.Table.Name, LSN: d.Pos.LSN, Seq: d.Pos.Seq, TxID: d.TxID, TSMs: d.CommitTime.UnixMilli()}})
}

func (t *tailWriter) Message(_ context.Context, m change.Message) error {
	if len(t.only) > 0 {
		return nil
	}
	return t.emit(envelope{Op: "m", Message: &tailMessage{Prefix: m.Prefix, Content: string(m.Content)},
		Source: tailSource{Connector: t.connector, LSN: m.Pos.LSN, Seq: m.Pos.Seq, TxID: m.TxID, TSMs: m.CommitTime.UnixMilli()}})
}

func (t *tailWriter) Buffered() int64 { return 0 }

func (t *tailWriter) Flush(context.Context, pipeline.Checkpoint) error { return t.out.Flush() }

func (t *tailWriter) LoadCheckpoint(context.Context) (pipeline.Checkpoint, bool, error) {
	return pipeline.Checkpoint{}, false, nil
}

func rowJSON(s *change.Schema, vals []any) map[string]any {
	if s == nil {
		return nil
	}
	m := make(map[string]any, len(vals))
	for i, v := range vals {
		if i >= len(s.Fields) {
			break
		}
		m[s.Fields[i].Name] = JSONValue(v, s.Fields[i].Type)
	}
	return m
}

// JSONValue renders a decoded value for JSON output: exact decimals as
// strings, dates and timestamps in ISO 8601, non-finite floats as strings.
func JSONValue(v any, t iceberg.Type) any {
	switch x := v.(type) {
	case nil:
		return nil
	case decimal128.Num:
		scale := int32(0)
		if dt, ok := t.(iceberg.DecimalType); ok {
			scale = int32(dt.Scale())
		}
		return x.ToString(scale)
	case arrow.Date32:
		if x == math.MaxInt32 {
			return "infinity"
		} else if x == math.MinInt32 {
			return "-infinity"
		}
		return x.ToTime().Format("2006-01-02")
	case arrow.Time64:
		return x.ToTime(arrow.Microsecond).Format("15:04:05.999999")
	case arrow.Timestamp:
		if x == math.MaxInt64 {
			return "infinity"
		} else if x == math.MinInt64 {
			return "-infinity"
		}
		ts := time.UnixMicro(int64(x)).UTC()
		if _, ok := t.(iceberg.TimestampTzType); ok {
			return ts.Format(time.RFC3339Nano)
		}
		return ts.Format("2006-01-02T15:04:05.999999")
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Sprint(x)
		}
		return x
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Sprint(x)
		}
		return x
	case []any:
		var et iceberg.Type
		if lt, ok := t.(*iceberg.ListType); ok {
			et = lt.Element
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = JSONValue(e, et)
		}
		return out
	}
	return v
}
