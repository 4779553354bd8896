package event

import (
	"time"
	"unicode/utf8"

	"github.com/tidemark/tidemark/internal/change"
)

// The tidemark shape: today's `tidemark tail` envelope (before, after,
// source{connector, schema, table, lsn, seq, txId, ts_ms}, op, ts_ms,
// error, raw, unchanged, message) plus what it lacked.

func (e *Encoder) tidemarkSource(t change.TableID, p change.Position, txID int64, commit time.Time) object {
	o := object{{"connector", e.o.Connector}, {"name", e.o.Name}, {"db", e.o.Database}}
	if t.Name != "" {
		o = append(o, member{"schema", t.Schema}, member{"table", t.Name})
	}
	return append(o,
		member{"lsn", p.LSN}, member{"seq", p.Seq}, member{"position", e.position(p)},
		member{"txId", txID}, member{"ts_ms", commit.UnixMilli()},
		member{"commit_time", commit.UTC().Format(time.RFC3339Nano)})
}

func readable(f change.Field, v any) any { return JSONValue(v, f.Type) }

func (e *Encoder) tidemarkChange(c *change.Change) object {
	o := object{
		{"before", nullable(row(c.Schema, before(c), c.Unchanged, readable, nil))},
		{"after", nullable(row(c.Schema, after(c), c.Unchanged, readable, nil))},
		{"source", e.tidemarkSource(c.Table, c.Pos, c.TxID, c.CommitTime)},
		{"op", c.Op.String()},
		{"ts_ms", e.o.Now().UnixMilli()},
	}
	if c.Schema != nil && len(c.Schema.Key) > 0 {
		o = append(o, member{"key", c.Schema.Key})
	}
	if len(c.Unchanged) > 0 {
		o = append(o, member{"unchanged", c.Unchanged})
	}
	return o
}

func (e *Encoder) tidemarkDeadLetter(d change.DeadLetter) object {
	return object{
		{"before", nil}, {"after", nil},
		{"source", e.tidemarkSource(d.Table, d.Pos, d.TxID, d.CommitTime)},
		{"op", d.Op.String()},
		{"ts_ms", e.o.Now().UnixMilli()},
		{"error", d.Error}, {"raw", d.Raw},
	}
}

func (e *Encoder) tidemarkMessage(m change.Message) object {
	msg := object{{"prefix", m.Prefix}}
	if utf8.Valid(m.Content) {
		msg = append(msg, member{"content", string(m.Content)})
	} else {
		msg = append(msg, member{"content_base64", m.Content})
	}
	msg = append(msg, member{"transactional", m.Transactional})
	return object{
		{"before", nil}, {"after", nil},
		{"source", e.tidemarkSource(change.TableID{}, m.Pos, m.TxID, m.CommitTime)},
		{"op", change.OpMessage.String()},
		{"ts_ms", e.o.Now().UnixMilli()},
		{"message", msg},
	}
}
