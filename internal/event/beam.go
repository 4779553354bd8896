package event

import (
	"github.com/tidemark/tidemark/internal/change"
)

// The beam shape: Apache Beam's SourceRecordJson (DebeziumIO's
// SourceRecordJsonMapper), Gson with serializeNulls:
//
//	{"metadata":{"connector","version","name","database","schema","table"},
//	 "before":{"fields":{...}}|null, "after":{"fields":{...}}|null}
//
// metadata.schema is the source's schema; for MySQL, whose Debezium
// source block has none, Beam reads the binlog file name instead, and so
// does this shape. Values are the Debezium shape's, but decimals are JSON
// numbers (Gson prints the BigDecimal Kafka Connect decodes).

func beamValue(f change.Field, v any) any { return connectValue(v, f.Type, true) }

func (e *Encoder) beamMetadata(t change.TableID, p change.Position) object {
	schema := any(t.Schema)
	if e.o.Connector == MySQL {
		schema, _ = e.binlog(p.LSN)
	}
	return object{{"connector", e.o.Connector}, {"version", e.o.Version}, {"name", e.o.Name},
		{"database", e.o.Database}, {"schema", schema}, {"table", t.Name}}
}

func fields(o object) any {
	if o == nil {
		return nil
	}
	return object{{"fields", o}}
}

func (e *Encoder) beamChange(c *change.Change) object {
	return object{
		{"metadata", e.beamMetadata(c.Table, c.Pos)},
		{"before", fields(row(c.Schema, before(c), c.Unchanged, beamValue, connectUnavailable))},
		{"after", fields(row(c.Schema, after(c), c.Unchanged, beamValue, connectUnavailable))},
	}
}

// beamDeadLetter: before and after null, and the tidemark shape's error
// and raw (Beam's shape has no place for them).
func (e *Encoder) beamDeadLetter(d change.DeadLetter) object {
	return object{{"metadata", e.beamMetadata(d.Table, d.Pos)}, {"before", nil}, {"after", nil},
		{"error", d.Error}, {"raw", d.Raw}}
}

// beamMessage is what Beam makes of Debezium's message event: its source
// block without a table, no before, no after (the content is lost: use
// the tidemark or debezium shape for messages).
func (e *Encoder) beamMessage(m change.Message) object {
	return object{{"metadata", e.beamMetadata(change.TableID{}, m.Pos)}, {"before", nil}, {"after", nil}}
}
