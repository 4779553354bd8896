package event

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/change"
)

// The debezium shape: Debezium's change event value for its PostgreSQL
// and MySQL connectors (Debezium 2.x field names).

func connect(f change.Field, v any) any { return connectValue(v, f.Type, false) }

// debeziumSource is the source block. For PostgreSQL, lsn is the
// transaction's commit LSN and sequence ["<lsn>","<seq>"] orders the
// change inside it; for MySQL, file and pos are the transaction's binlog
// coordinate and row the change's sequence number in it.
func (e *Encoder) debeziumSource(t change.TableID, op change.Op, p change.Position, txID int64, commit time.Time) object {
	snapshot := "false"
	if op == change.OpRead {
		snapshot = "true"
	}
	o := object{
		{"version", e.o.Version}, {"connector", e.o.Connector}, {"name", e.o.Name},
		{"ts_ms", commit.UnixMilli()}, {"snapshot", snapshot}, {"db", e.o.Database},
	}
	if e.o.Connector == MySQL {
		file, pos := e.binlog(p.LSN)
		return append(o,
			member{"sequence", nil}, member{"ts_us", commit.UnixMicro()}, member{"ts_ns", commit.UnixNano()},
			member{"table", nullString(t.Name)}, member{"server_id", 0}, member{"gtid", nil},
			member{"file", file}, member{"pos", pos}, member{"row", p.Seq},
			member{"thread", nil}, member{"query", nil})
	}
	return append(o,
		member{"sequence", fmt.Sprintf(`[%q,%q]`, strconv.FormatUint(p.LSN, 10), strconv.FormatInt(p.Seq, 10))},
		member{"ts_us", commit.UnixMicro()}, member{"ts_ns", commit.UnixNano()},
		member{"schema", t.Schema}, member{"table", t.Name},
		member{"txId", txID}, member{"lsn", p.LSN}, member{"xmin", nil})
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (e *Encoder) debeziumEnvelope(bef, aft any, source object, op change.Op) object {
	now := e.o.Now()
	return object{
		{"before", bef}, {"after", aft}, {"source", source}, {"transaction", nil},
		{"op", op.String()},
		{"ts_ms", now.UnixMilli()}, {"ts_us", now.UnixMicro()}, {"ts_ns", now.UnixNano()},
	}
}

func (e *Encoder) debeziumChange(c *change.Change) ([]byte, error) {
	p := e.debeziumEnvelope(
		nullable(row(c.Schema, before(c), c.Unchanged, connect, connectUnavailable)),
		nullable(row(c.Schema, after(c), c.Unchanged, connect, connectUnavailable)),
		e.debeziumSource(c.Table, c.Op, c.Pos, c.TxID, c.CommitTime), c.Op)
	return e.withSchema(p, func() object { return e.envelopeSchema(c.Table, c.Schema) })
}

func (e *Encoder) debeziumDeadLetter(d change.DeadLetter) ([]byte, error) {
	p := e.debeziumEnvelope(nil, nil, e.debeziumSource(d.Table, d.Op, d.Pos, d.TxID, d.CommitTime), d.Op)
	p = append(p, member{"error", d.Error}, member{"raw", d.Raw})
	return e.withSchema(p, func() object { return e.envelopeSchema(d.Table, nil) })
}

// debeziumMessage is Debezium's logical decoding message event: op m,
// message{prefix, content as base64}, no before or after.
func (e *Encoder) debeziumMessage(m change.Message) ([]byte, error) {
	now := e.o.Now()
	p := object{
		{"op", change.OpMessage.String()},
		{"ts_ms", now.UnixMilli()}, {"ts_us", now.UnixMicro()}, {"ts_ns", now.UnixNano()},
		{"source", e.debeziumSource(change.TableID{}, change.OpMessage, m.Pos, m.TxID, m.CommitTime)},
		{"message", object{{"prefix", m.Prefix}, {"content", m.Content}}},
	}
	return e.withSchema(p, e.messageSchema)
}

// withSchema marshals payload, in the {"schema", "payload"} form when
// Options.Schema asks for it.
func (e *Encoder) withSchema(payload object, schema func() object) ([]byte, error) {
	if !e.o.Schema {
		return marshal(payload)
	}
	return marshal(object{{"schema", schema()}, {"payload", payload}})
}

// Kafka Connect schemas, as JsonConverter writes them.

func field(typ string, optional bool, name string, extra ...member) object {
	o := object{{"type", typ}, {"optional", optional}}
	o = append(o, extra...)
	if name != "" {
		o = append(o, member{"field", name})
	}
	return o
}

// connectTypes is the one table between lake types and Kafka Connect
// schemas (type, and Debezium's semantic type name where the plain type
// cannot say it): columnSchema writes it, the Decoder reads it back
// (connectLakeType). The cases it cannot hold (smallint's int16, decimals,
// lists, JSON and UUID strings) are in columnSchema and connectLakeType.
var connectTypes = []struct {
	ice  iceberg.Type
	typ  string
	name string
}{
	{iceberg.PrimitiveTypes.Int32, "int32", ""},
	{iceberg.PrimitiveTypes.Int64, "int64", ""},
	{iceberg.PrimitiveTypes.Float32, "float", ""},
	{iceberg.PrimitiveTypes.Float64, "double", ""},
	{iceberg.PrimitiveTypes.Bool, "boolean", ""},
	{iceberg.PrimitiveTypes.Binary, "bytes", ""},
	{iceberg.PrimitiveTypes.Date, "int32", "io.debezium.time.Date"},
	{iceberg.PrimitiveTypes.Time, "int64", "io.debezium.time.MicroTime"},
	{iceberg.PrimitiveTypes.Timestamp, "int64", "io.debezium.time.MicroTimestamp"},
	{iceberg.PrimitiveTypes.TimestampTz, "string", "io.debezium.time.ZonedTimestamp"},
	{iceberg.PrimitiveTypes.String, "string", ""},
}

// Debezium's semantic type names that columnSchema writes beside
// connectTypes.
const (
	connectDecimal = "org.apache.kafka.connect.data.Decimal"
	connectJSON    = "io.debezium.data.Json"
	connectUUID    = "io.debezium.data.Uuid"
)

// columnSchema is a column's Connect schema: its type and Debezium's
// semantic type name for what a plain type cannot say.
func columnSchema(t iceberg.Type, sourceType string, optional bool, name string) object {
	logical := func(typ, logicalName string, extra ...member) object {
		return field(typ, optional, name, append([]member{{"name", logicalName}, {"version", 1}}, extra...)...)
	}
	st := strings.ToLower(sourceType)
	switch t := t.(type) {
	case iceberg.Int32Type:
		if st == "smallint" || strings.HasPrefix(st, "smallint ") {
			return field("int16", optional, name)
		}
	case iceberg.FixedType:
		return field("bytes", optional, name)
	case iceberg.DecimalType:
		return logical("bytes", connectDecimal, member{"parameters", object{
			{"scale", strconv.Itoa(t.Scale())}, {"connect.decimal.precision", strconv.Itoa(t.Precision())}}})
	case iceberg.UUIDType:
		return logical("string", connectUUID)
	case *iceberg.ListType:
		elem := strings.TrimSuffix(sourceType, "[]")
		return field("array", optional, name, member{"items", columnSchema(t.Element, elem, true, "")})
	case iceberg.StringType:
		switch {
		case st == "json" || st == "jsonb":
			return logical("string", connectJSON)
		case st == "uuid":
			return logical("string", connectUUID)
		}
	}
	for _, ct := range connectTypes {
		if ct.ice.Equals(t) {
			if ct.name == "" {
				return field(ct.typ, optional, name)
			}
			return logical(ct.typ, ct.name)
		}
	}
	return field("string", optional, name)
}

// envelopeSchema is the value schema of a table's change events, or with
// s nil (a dead-letter row) of events whose before and after are null.
func (e *Encoder) envelopeSchema(t change.TableID, s *change.Schema) object {
	k := schemaKey{s, t}
	if o, ok := e.schemas[k]; ok {
		return o
	}
	prefix := e.o.Name + "." + t.Schema + "." + t.Name
	var cols []any
	if s != nil {
		for _, f := range s.Fields {
			cols = append(cols, columnSchema(f.Type, f.SourceType, !contains(s.Key, f.Name), f.Name))
		}
	}
	value := func(name string) object {
		return object{{"type", "struct"}, {"fields", cols}, {"optional", true}, {"name", prefix + ".Value"}, {"field", name}}
	}
	o := object{
		{"type", "struct"},
		{"fields", []any{value("before"), value("after"), e.sourceSchema(), transactionSchema(),
			field("string", false, "op"), field("int64", true, "ts_ms"), field("int64", true, "ts_us"), field("int64", true, "ts_ns")}},
		{"optional", false},
		{"name", prefix + ".Envelope"},
	}
	e.schemas[k] = o
	return o
}

func (e *Encoder) sourceSchema() object {
	fs := []any{
		field("string", false, "version"), field("string", false, "connector"), field("string", false, "name"),
		field("int64", false, "ts_ms"),
		field("string", true, "snapshot", member{"name", "io.debezium.data.Enum"}, member{"version", 1},
			member{"parameters", object{{"allowed", "true,last,false,incremental"}}}, member{"default", "false"}),
		field("string", false, "db"), field("string", true, "sequence"),
		field("int64", true, "ts_us"), field("int64", true, "ts_ns"),
	}
	name := "io.debezium.connector.postgresql.Source"
	if e.o.Connector == MySQL {
		name = "io.debezium.connector.mysql.Source"
		fs = append(fs, field("string", true, "table"), field("int64", false, "server_id"), field("string", true, "gtid"),
			field("string", false, "file"), field("int64", false, "pos"), field("int32", false, "row"),
			field("int64", true, "thread"), field("string", true, "query"))
	} else {
		fs = append(fs, field("string", false, "schema"), field("string", false, "table"),
			field("int64", true, "txId"), field("int64", true, "lsn"), field("int64", true, "xmin"))
	}
	return object{{"type", "struct"}, {"fields", fs}, {"optional", false}, {"name", name}, {"field", "source"}}
}

func transactionSchema() object {
	return object{{"type", "struct"}, {"fields", []any{
		field("string", false, "id"), field("int64", false, "total_order"), field("int64", false, "data_collection_order")}},
		{"optional", true}, {"name", "event.block"}, {"version", 1}, {"field", "transaction"}}
}

func (e *Encoder) messageSchema() object {
	return object{{"type", "struct"}, {"fields", []any{
		field("string", false, "op"), field("int64", true, "ts_ms"), field("int64", true, "ts_us"), field("int64", true, "ts_ns"),
		e.sourceSchema(),
		object{{"type", "struct"}, {"fields", []any{field("string", false, "prefix"), field("bytes", true, "content")}},
			{"optional", false}, {"name", "io.debezium.connector.postgresql.Message"}, {"field", "message"}},
	}}, {"optional", false}, {"name", "io.debezium.connector.postgresql.MessageValue"}}
}

// Key encodes a change's record key as Debezium writes it: the key
// columns' values (from the new row, or for a delete the old one) as an
// object in the key's order, in the {"schema", "payload"} form with
// Options.Schema (schema name <name>.<schema>.<table>.Key). nil for a
// table without a key and for a truncate (Debezium's key is null then).
// The values are encoded as the envelope's are.
func (e *Encoder) Key(c *change.Change) ([]byte, error) {
	if c.Schema == nil || len(c.Schema.Key) == 0 || c.Op == change.OpTruncate {
		return nil, nil
	}
	vals := after(c)
	if vals == nil {
		vals = before(c)
	}
	payload := make(object, 0, len(c.Schema.Key))
	var fields []any
	for _, k := range c.Schema.Key {
		for i, f := range c.Schema.Fields {
			if f.Name != k || i >= len(vals) {
				continue
			}
			payload = append(payload, member{f.Name, connect(f, vals[i])})
			fields = append(fields, columnSchema(f.Type, f.SourceType, false, f.Name))
		}
	}
	if !e.o.Schema {
		return marshal(payload)
	}
	schema := object{{"type", "struct"}, {"fields", fields}, {"optional", false},
		{"name", e.o.Name + "." + c.Table.Schema + "." + c.Table.Name + ".Key"}}
	return marshal(object{{"schema", schema}, {"payload", payload}})
}
