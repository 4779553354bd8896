package event_test

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/event"
)

// TestDecodeRoundTrip: what the Kafka sink's encoder writes (debezium,
// with schema), the Decoder reads back to the same change: the same lake
// types, values, key, position, and the TOAST columns left unchanged.
func TestDecodeRoundTrip(t *testing.T) {
	schema := &change.Schema{Fields: []change.Field{
		{Name: "id", Type: iceberg.PrimitiveTypes.Int64, SourceType: "bigint"},
		{Name: "k2", Type: iceberg.PrimitiveTypes.Int32, SourceType: "smallint"},
		{Name: "n", Type: iceberg.PrimitiveTypes.Int32, SourceType: "integer"},
		{Name: "f4", Type: iceberg.PrimitiveTypes.Float32, SourceType: "real"},
		{Name: "f8", Type: iceberg.PrimitiveTypes.Float64, SourceType: "double precision"},
		{Name: "ok", Type: iceberg.PrimitiveTypes.Bool, SourceType: "boolean"},
		{Name: "b", Type: iceberg.PrimitiveTypes.Binary, SourceType: "bytea"},
		{Name: "amount", Type: iceberg.DecimalTypeOf(12, 3), SourceType: "numeric(12,3)"},
		{Name: "d", Type: iceberg.PrimitiveTypes.Date, SourceType: "date"},
		{Name: "tm", Type: iceberg.PrimitiveTypes.Time, SourceType: "time without time zone"},
		{Name: "ts", Type: iceberg.PrimitiveTypes.Timestamp, SourceType: "timestamp without time zone"},
		{Name: "tz", Type: iceberg.PrimitiveTypes.TimestampTz, SourceType: "timestamp with time zone"},
		{Name: "js", Type: iceberg.PrimitiveTypes.String, SourceType: "jsonb"},
		{Name: "u", Type: iceberg.PrimitiveTypes.String, SourceType: "uuid"},
		{Name: "tags", Type: &iceberg.ListType{Element: iceberg.PrimitiveTypes.String}, SourceType: "text[]"},
		{Name: "nums", Type: &iceberg.ListType{Element: iceberg.PrimitiveTypes.Int64}, SourceType: "bigint[]"},
		{Name: "big", Type: iceberg.PrimitiveTypes.String, SourceType: "text"},
	}, Key: []string{"k2", "id"}}
	row := []any{int64(42), int32(-7), nil, float32(1.5), math.Inf(-1), true, []byte{0, 1, 255},
		decimal128.FromI64(-123456), arrow.Date32(19000), arrow.Time64(3_600_000_001), arrow.Timestamp(1_700_000_000_123_456),
		arrow.Timestamp(math.MaxInt64), `{"a": 1}`, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", []any{"x", nil, "z"}, []any{int64(1), int64(2)}, nil}
	enc, err := event.NewEncoder(event.Options{Shape: event.Debezium, Schema: true, Connector: event.PostgreSQL, Name: "shop", Database: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	commit := time.Date(2026, 12, 7, 10, 0, 0, 123456000, time.UTC)
	tbl := change.TableID{Schema: "public", Name: "orders"}
	dec := event.NewDecoder()
	for _, c := range []*change.Change{
		{Table: tbl, Op: change.OpRead, Values: row, Schema: schema, Pos: change.Position{LSN: 1 << 33, Seq: 5}, TxID: 9, CommitTime: commit},
		{Table: tbl, Op: change.OpInsert, Values: row, Schema: schema, Pos: change.Position{LSN: 1<<33 + 10, Seq: 1}, TxID: 10, CommitTime: commit},
		{Table: tbl, Op: change.OpUpdate, Values: row, Unchanged: []string{"big"}, Schema: schema, Pos: change.Position{LSN: 1<<33 + 20, Seq: 2}, TxID: 11, CommitTime: commit},
		{Table: tbl, Op: change.OpDelete, Values: row, Before: row, Schema: schema, Pos: change.Position{LSN: 1<<33 + 30, Seq: 3}, TxID: 12, CommitTime: commit},
		{Table: tbl, Op: change.OpTruncate, Values: make([]any, len(schema.Fields)), Schema: schema, Pos: change.Position{LSN: 1<<33 + 40, Seq: 1}, TxID: 13, CommitTime: commit},
	} {
		val, err := enc.Change(c)
		if err != nil {
			t.Fatal(err)
		}
		key, err := enc.Key(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := dec.Decode(key, val)
		if err != nil {
			t.Fatalf("op %s: %v", c.Op, err)
		}
		if got.Kind != event.KindChange {
			t.Fatalf("op %s: kind %v", c.Op, got.Kind)
		}
		g := got.Change
		if g.Table != c.Table || g.Op != c.Op || g.Pos != c.Pos || g.TxID != c.TxID || !g.CommitTime.Equal(c.CommitTime) {
			t.Errorf("op %s: got %s %s %s tx %d at %s, want %s %s %s tx %d at %s", c.Op, g.Table, g.Op, g.Pos, g.TxID, g.CommitTime,
				c.Table, c.Op, c.Pos, c.TxID, c.CommitTime)
		}
		if !reflect.DeepEqual(g.Schema.Key, schema.Key) {
			t.Errorf("op %s: key %v, want %v", c.Op, g.Schema.Key, schema.Key)
		}
		for i, f := range schema.Fields {
			if !g.Schema.Fields[i].Type.Equals(f.Type) || g.Schema.Fields[i].Name != f.Name {
				t.Errorf("column %s: %s %s, want %s", f.Name, g.Schema.Fields[i].Name, g.Schema.Fields[i].Type, f.Type)
			}
		}
		if !reflect.DeepEqual(g.Values, c.Values) {
			t.Errorf("op %s: values\n%#v\nwant\n%#v", c.Op, g.Values, c.Values)
		}
		if !reflect.DeepEqual(g.Unchanged, c.Unchanged) {
			t.Errorf("op %s: unchanged %v, want %v", c.Op, g.Unchanged, c.Unchanged)
		}
	}
	// One schema, decoded once: sinks cache per *change.Schema.
	a, _ := enc.Change(&change.Change{Table: tbl, Op: change.OpInsert, Values: row, Schema: schema, CommitTime: commit})
	d1, _ := dec.Decode(nil, a)
	d2, _ := dec.Decode(nil, a)
	if d1.Change.Schema != d2.Change.Schema {
		t.Error("the same Connect schema decoded to two *change.Schema")
	}

	// A message and a dead letter the producer published.
	m, _ := enc.Message(change.Message{Prefix: "audit", Content: []byte("hi"), Pos: change.Position{LSN: 77, Seq: 1}, TxID: 3, CommitTime: commit})
	if got, err := dec.Decode(nil, m); err != nil || got.Kind != event.KindMessage || got.Message.Prefix != "audit" || string(got.Message.Content) != "hi" || got.Message.Pos.LSN != 77 {
		t.Errorf("message: %+v %v", got, err)
	}
	dl, _ := enc.DeadLetter(change.DeadLetter{Table: tbl, Op: change.OpInsert, Pos: change.Position{LSN: 78, Seq: 2}, Raw: `{"id":"1"}`, Error: "too big", CommitTime: commit})
	if got, err := dec.Decode(nil, dl); err != nil || got.Kind != event.KindDeadLetter || got.DeadLetter.Error != "too big" || got.DeadLetter.Table != tbl {
		t.Errorf("dead letter: %+v %v", got, err)
	}
	if got, err := dec.Decode([]byte(`{"id":1}`), nil); err != nil || got.Kind != event.KindTombstone {
		t.Errorf("tombstone: %+v %v", got, err)
	}
}

// TestDecodeMalformed: an event the Decoder cannot read is a named
// DecodeError, never a panic or a silent skip.
func TestDecodeMalformed(t *testing.T) {
	const src = `"source":{"connector":"postgresql","ts_ms":1,"schema":"public","table":"t","lsn":5,"sequence":"[\"5\",\"1\"]"}`
	const sch = `"schema":{"type":"struct","fields":[{"type":"struct","field":"after","fields":[{"type":"int32","optional":false,"field":"id"}]}]}`
	for _, c := range []struct{ value, reason string }{
		{`not json`, event.ReasonNotJSON},
		{`{"before":null,"after":{"id":1},"op":"c"}`, event.ReasonNoSchema},
		{`{` + sch + `,"payload":{"after":{"id":1},"op":"c"}}`, event.ReasonBadEnvelope},
		{`{` + sch + `,"payload":{"after":{"id":1},"op":"x",` + src + `}}`, event.ReasonUnknownOp},
		{`{` + sch + `,"payload":{"after":{"id":"one"},"op":"c",` + src + `}}`, event.ReasonBadValue},
		{`{` + sch + `,"payload":{"after":{},"op":"c",` + src + `}}`, event.ReasonMissingColumn},
		{`{` + sch + `,"payload":{"after":{"id":1},"op":"c","source":{"connector":"postgresql","table":"t"}}}`, event.ReasonBadSource},
		{`{"schema":{"type":"struct","fields":[{"type":"struct","field":"after","fields":[{"type":"map","field":"m"}]}]},"payload":{"after":{"m":{}},"op":"c",` + src + `}}`, event.ReasonUnknownType},
	} {
		_, err := event.NewDecoder().Decode(nil, []byte(c.value))
		var de *event.DecodeError
		if !errors.As(err, &de) || de.Reason != c.reason {
			t.Errorf("%s: %v, want reason %s", c.value, err, c.reason)
		}
	}
}
