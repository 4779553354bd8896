package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/change"
)

// Decoder reads back the events an Encoder of the debezium shape writes
// with Options.Schema (Kafka Connect's JsonConverter with
// schemas.enable=true: what `tidemark run --sink kafka://` publishes):
// each column's lake type comes from the event's Connect schema, through
// the same table the Encoder writes it with (connectTypes), so a change
// decoded here lands in the lake with the types `tidemark run` gives it.
//
// Not safe for concurrent use: it caches the schemas it has seen (one
// *change.Schema per distinct Connect schema, shared by pointer as sinks
// expect).
type Decoder struct {
	schemas map[string]*schemaEntry
}

// NewDecoder returns a Decoder.
func NewDecoder() *Decoder { return &Decoder{schemas: map[string]*schemaEntry{}} }

// Kind is what an event holds.
type Kind int

// The kinds of events.
const (
	// KindChange: a row change, snapshot read or truncate (Decoded.Change).
	KindChange Kind = iota
	// KindMessage: a logical decoding message (Decoded.Message).
	KindMessage
	// KindDeadLetter: a row the producer could not decode, with its error
	// (Decoded.DeadLetter).
	KindDeadLetter
	// KindTombstone: a record without a value (Debezium's tombstone after a
	// delete, for log compaction): nothing to load.
	KindTombstone
)

// Decoded is one decoded event.
type Decoded struct {
	Kind       Kind
	Change     *change.Change
	Message    change.Message
	DeadLetter change.DeadLetter
}

// Reasons a DecodeError names.
const (
	ReasonNotJSON       = "not_json"         // the value is not a JSON object
	ReasonNoSchema      = "no_schema"        // no {"schema", "payload"} form (schemas.enable=false)
	ReasonBadEnvelope   = "bad_envelope"     // payload or schema not Debezium's envelope
	ReasonUnknownOp     = "unknown_op"       // op is none of r, c, u, d, t, m
	ReasonBadSource     = "bad_source"       // the source block has no readable position or table
	ReasonBadValue      = "bad_value"        // a column's value does not match its schema type
	ReasonUnknownType   = "unsupported_type" // a Connect type the lake has no type for
	ReasonMissingColumn = "missing_column"   // a row lacks a column its schema has
)

// DecodeError is an event the Decoder cannot read. Reason is one of the
// Reason constants; the message names the column or field at fault.
type DecodeError struct {
	Reason string
	Err    error
}

func (e *DecodeError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

func decodeErr(reason, format string, args ...any) error {
	return &DecodeError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// envelopeIn is the part of an event the Decoder reads.
type envelopeIn struct {
	Schema  json.RawMessage `json:"schema"`
	Payload *payloadIn      `json:"payload"`
}

type payloadIn struct {
	Before  json.RawMessage `json:"before"`
	After   json.RawMessage `json:"after"`
	Source  *sourceIn       `json:"source"`
	Op      string          `json:"op"`
	Message *struct {
		Prefix  string `json:"prefix"`
		Content []byte `json:"content"`
	} `json:"message"`
	Error *string `json:"error"`
	Raw   *string `json:"raw"`
}

// sourceIn is the source block (debeziumSource): PostgreSQL's lsn and
// sequence, MySQL's file, pos and row.
type sourceIn struct {
	Connector string          `json:"connector"`
	TsMs      int64           `json:"ts_ms"`
	TsUs      *int64          `json:"ts_us"`
	DB        string          `json:"db"`
	Schema    string          `json:"schema"`
	Table     *string         `json:"table"`
	Sequence  *string         `json:"sequence"`
	TxID      *int64          `json:"txId"`
	LSN       *json.Number    `json:"lsn"`
	File      string          `json:"file"`
	Pos       *json.Number    `json:"pos"`
	Row       *json.Number    `json:"row"`
	GTID      json.RawMessage `json:"gtid"`
}

// schemaIn is a Connect schema.
type schemaIn struct {
	Type       string            `json:"type"`
	Optional   bool              `json:"optional"`
	Name       string            `json:"name"`
	Field      string            `json:"field"`
	Fields     []schemaIn        `json:"fields"`
	Items      *schemaIn         `json:"items"`
	Parameters map[string]string `json:"parameters"`
}

// Decode reads one record: key (nil for none) and value (nil: a
// tombstone). An event it cannot read is a *DecodeError; it never
// panics on input.
func (d *Decoder) Decode(key, value []byte) (Decoded, error) {
	if value == nil {
		return Decoded{Kind: KindTombstone}, nil
	}
	var env envelopeIn
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	if err := dec.Decode(&env); err != nil {
		return Decoded{}, decodeErr(ReasonNotJSON, "%v", err)
	}
	if env.Payload == nil || len(env.Schema) == 0 || string(env.Schema) == "null" {
		return Decoded{}, decodeErr(ReasonNoSchema, "the event has no {\"schema\", \"payload\"} form: tidemark load reads Kafka Connect JSON with schemas.enable=true")
	}
	p := env.Payload
	if p.Source == nil {
		return Decoded{}, decodeErr(ReasonBadEnvelope, "the payload has no source block")
	}
	table, pos, err := p.Source.position()
	if err != nil {
		return Decoded{}, err
	}
	commit := p.Source.commitTime()
	var txID int64
	if p.Source.TxID != nil {
		txID = *p.Source.TxID
	}
	if p.Error != nil {
		// A dead letter the producer published (debeziumDeadLetter).
		raw := ""
		if p.Raw != nil {
			raw = *p.Raw
		}
		return Decoded{Kind: KindDeadLetter, DeadLetter: change.DeadLetter{Table: table, Op: opOf(p.Op), Pos: pos, TxID: txID,
			CommitTime: commit, Raw: raw, Error: *p.Error}}, nil
	}
	if p.Op == string(change.OpMessage) {
		if p.Message == nil {
			return Decoded{}, decodeErr(ReasonBadEnvelope, "op m without a message block")
		}
		return Decoded{Kind: KindMessage, Message: change.Message{Prefix: p.Message.Prefix, Content: p.Message.Content,
			Transactional: true, Pos: pos, TxID: txID, CommitTime: commit}}, nil
	}
	op := opOf(p.Op)
	switch op {
	case change.OpRead, change.OpInsert, change.OpUpdate, change.OpDelete, change.OpTruncate:
	default:
		return Decoded{}, decodeErr(ReasonUnknownOp, "op %q (want r, c, u, d, t or m)", p.Op)
	}
	if table.Name == "" {
		return Decoded{}, decodeErr(ReasonBadSource, "the source block names no table")
	}
	sch, cols, err := d.schema(env.Schema, key)
	if err != nil {
		return Decoded{}, err
	}
	c := &change.Change{Table: table, Op: op, Schema: sch, Pos: pos, TxID: txID, CommitTime: commit}
	before, _, err := readRow(p.Before, sch, cols, "before")
	if err != nil {
		return Decoded{}, err
	}
	after, unchanged, err := readRow(p.After, sch, cols, "after")
	if err != nil {
		return Decoded{}, err
	}
	switch op {
	case change.OpDelete:
		if before == nil {
			return Decoded{}, decodeErr(ReasonBadEnvelope, "a delete without before")
		}
		c.Values, c.Before = before, before
	case change.OpTruncate:
		c.Values = make([]any, len(sch.Fields))
	default:
		if after == nil {
			return Decoded{}, decodeErr(ReasonBadEnvelope, "op %s without after", op)
		}
		c.Values, c.Before, c.Unchanged = after, before, unchanged
	}
	return Decoded{Kind: KindChange, Change: c}, nil
}

func opOf(s string) change.Op {
	if len(s) != 1 {
		return 0
	}
	return change.Op(s[0])
}

// position reads the table and the (commit position, seq) of an event:
// PostgreSQL's lsn and sequence ["<lsn>","<seq>"]; MySQL's binlog file
// number and pos (the encoding of cdc_source_lsn) and row.
func (s *sourceIn) position() (change.TableID, change.Position, error) {
	var t change.TableID
	if s.Table != nil {
		t.Name = *s.Table
	}
	num := func(n *json.Number, what string) (int64, error) {
		if n == nil {
			return 0, decodeErr(ReasonBadSource, "source.%s is missing", what)
		}
		v, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil {
			return 0, decodeErr(ReasonBadSource, "source.%s %q is not an integer", what, n.String())
		}
		return v, nil
	}
	if s.Connector == MySQL {
		t.Schema = s.DB
		i := strings.LastIndexAny(s.File, ".")
		idx, err := strconv.ParseUint(s.File[i+1:], 10, 32)
		if err != nil {
			return t, change.Position{}, decodeErr(ReasonBadSource, "source.file %q has no binlog file number", s.File)
		}
		pos, err := num(s.Pos, "pos")
		if err != nil {
			return t, change.Position{}, err
		}
		row, err := num(s.Row, "row")
		if err != nil {
			return t, change.Position{}, err
		}
		return t, change.Position{LSN: idx<<32 | uint64(uint32(pos)), Seq: row}, nil
	}
	t.Schema = s.Schema
	lsn, err := num(s.LSN, "lsn")
	if err != nil {
		return t, change.Position{}, err
	}
	p := change.Position{LSN: uint64(lsn)}
	if s.Sequence != nil {
		var seq []string
		if err := json.Unmarshal([]byte(*s.Sequence), &seq); err != nil || len(seq) != 2 {
			return t, p, decodeErr(ReasonBadSource, "source.sequence %q is not [\"<lsn>\",\"<seq>\"]", *s.Sequence)
		}
		if p.Seq, err = strconv.ParseInt(seq[1], 10, 64); err != nil {
			return t, p, decodeErr(ReasonBadSource, "source.sequence %q: %v", *s.Sequence, err)
		}
	}
	return t, p, nil
}

// commitTime is the source commit time: ts_us, else ts_ms.
func (s *sourceIn) commitTime() time.Time {
	if s.TsUs != nil {
		return time.UnixMicro(*s.TsUs).UTC()
	}
	return time.UnixMilli(s.TsMs).UTC()
}

// column is how one column's values are read.
type column struct {
	name string
	read func(raw json.RawMessage) (any, error)
	// unavailable is Debezium's placeholder for an unchanged TOAST value
	// in this column's form (nil: the type has none).
	unavailable []byte
}

type schemaEntry struct {
	s    *change.Schema
	cols []column
}

// schema returns the table schema of an envelope's Connect schema (cached
// by its text) and the readers of its columns. The key is the record key:
// its schema orders the key columns.
func (d *Decoder) schema(raw json.RawMessage, key []byte) (*change.Schema, []column, error) {
	if e, ok := d.schemas[string(raw)]; ok {
		return e.s, e.cols, nil
	}
	var env schemaIn
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, nil, decodeErr(ReasonBadEnvelope, "schema: %v", err)
	}
	var row *schemaIn
	for i := range env.Fields {
		if f := &env.Fields[i]; (f.Field == "after" || f.Field == "before") && f.Type == "struct" {
			row = f
			break
		}
	}
	if row == nil {
		return nil, nil, decodeErr(ReasonBadEnvelope, "the schema has no before or after struct")
	}
	s := &change.Schema{}
	cols := make([]column, 0, len(row.Fields))
	for _, f := range row.Fields {
		t, read, err := connectLakeType(f)
		if err != nil {
			return nil, nil, decodeErr(ReasonUnknownType, "column %q: %v", f.Field, err)
		}
		s.Fields = append(s.Fields, change.Field{Name: f.Field, Type: t, SourceType: connectSourceType(f)})
		col := column{name: f.Field, read: read}
		if u := connectUnavailable(change.Field{Type: t}); u != nil {
			col.unavailable, _ = marshal(u)
		}
		cols = append(cols, col)
		if !f.Optional {
			s.Key = append(s.Key, f.Field)
		}
	}
	if order := keyOrder(key); len(order) == len(s.Key) {
		s.Key = order
	}
	if len(d.schemas) > 1024 {
		clear(d.schemas) // a bound on a stream of ever new schemas
	}
	d.schemas[string(raw)] = &schemaEntry{s: s, cols: cols}
	return s, cols, nil
}

// keyOrder is the order of the key columns in a record key written with
// its schema (Encoder.Key); nil when it cannot tell.
func keyOrder(key []byte) []string {
	if key == nil {
		return nil
	}
	var k struct {
		Schema *schemaIn `json:"schema"`
	}
	if json.Unmarshal(key, &k) != nil || k.Schema == nil {
		return nil
	}
	out := make([]string, 0, len(k.Schema.Fields))
	for _, f := range k.Schema.Fields {
		out = append(out, f.Field)
	}
	return out
}

// connectSourceType is a column's source type for messages: Debezium's
// __debezium.source.column.type parameter when the producer propagated
// it, else the Connect type.
func connectSourceType(f schemaIn) string {
	if st := f.Parameters["__debezium.source.column.type"]; st != "" {
		return strings.ToLower(st)
	}
	if f.Name != "" {
		return f.Type + " (" + f.Name + ")"
	}
	return f.Type
}

// connectLakeType is the lake type of a column's Connect schema, and the
// reader of its values (the inverse of columnSchema and connectValue).
func connectLakeType(f schemaIn) (iceberg.Type, func(json.RawMessage) (any, error), error) {
	switch {
	case f.Type == "array":
		if f.Items == nil {
			return nil, nil, errors.New("an array without items")
		}
		et, read, err := connectLakeType(*f.Items)
		if err != nil {
			return nil, nil, err
		}
		return &iceberg.ListType{Element: et, ElementRequired: false}, func(raw json.RawMessage) (any, error) {
			var elems []json.RawMessage
			if err := json.Unmarshal(raw, &elems); err != nil {
				return nil, err
			}
			out := make([]any, len(elems))
			for i, e := range elems {
				if isNull(e) {
					continue
				}
				v, err := read(e)
				if err != nil {
					return nil, fmt.Errorf("element %d: %w", i, err)
				}
				out[i] = v
			}
			return out, nil
		}, nil
	case f.Name == connectDecimal:
		p, perr := strconv.Atoi(f.Parameters["connect.decimal.precision"])
		s, serr := strconv.Atoi(f.Parameters["scale"])
		if perr != nil || serr != nil || p < 1 || p > 38 || s < 0 || s > p {
			return nil, nil, fmt.Errorf("a decimal without a precision of 1 to 38 and a scale 0 to precision (parameters %v)", f.Parameters)
		}
		return iceberg.DecimalTypeOf(p, s), readDecimal, nil
	case f.Name == connectJSON || f.Name == connectUUID:
		return iceberg.PrimitiveTypes.String, readString, nil
	case f.Type == "int8" || f.Type == "int16":
		return iceberg.PrimitiveTypes.Int32, readInt32, nil
	}
	for _, ct := range connectTypes {
		if ct.typ == f.Type && ct.name == f.Name {
			return ct.ice, valueReader(ct.ice), nil
		}
	}
	// A semantic name this table does not know over a plain type: the
	// plain type's values.
	for _, ct := range connectTypes {
		if ct.typ == f.Type && ct.name == "" {
			return ct.ice, valueReader(ct.ice), nil
		}
	}
	return nil, nil, fmt.Errorf("Connect type %q (name %q) has no lake type", f.Type, f.Name)
}

// valueReader reads a value of a connectTypes lake type.
func valueReader(t iceberg.Type) func(json.RawMessage) (any, error) {
	switch t {
	case iceberg.PrimitiveTypes.Int32:
		return readInt32
	case iceberg.PrimitiveTypes.Int64:
		return readInt64
	case iceberg.PrimitiveTypes.Float32:
		return func(raw json.RawMessage) (any, error) {
			f, err := readFloat(raw, 32)
			return float32(f), err
		}
	case iceberg.PrimitiveTypes.Float64:
		return func(raw json.RawMessage) (any, error) { return readFloat(raw, 64) }
	case iceberg.PrimitiveTypes.Bool:
		return func(raw json.RawMessage) (any, error) {
			var b bool
			err := json.Unmarshal(raw, &b)
			return b, err
		}
	case iceberg.PrimitiveTypes.Binary:
		return func(raw json.RawMessage) (any, error) {
			var b []byte
			err := json.Unmarshal(raw, &b)
			return b, err
		}
	case iceberg.PrimitiveTypes.Date:
		return func(raw json.RawMessage) (any, error) {
			n, err := readInt32(raw)
			if err != nil {
				return nil, err
			}
			return arrow.Date32(n.(int32)), nil
		}
	case iceberg.PrimitiveTypes.Time:
		return func(raw json.RawMessage) (any, error) {
			n, err := readInt64(raw)
			if err != nil {
				return nil, err
			}
			return arrow.Time64(n.(int64)), nil
		}
	case iceberg.PrimitiveTypes.Timestamp:
		return func(raw json.RawMessage) (any, error) {
			n, err := readInt64(raw)
			if err != nil {
				return nil, err
			}
			return arrow.Timestamp(n.(int64)), nil
		}
	case iceberg.PrimitiveTypes.TimestampTz:
		return readZoned
	}
	return readString
}

func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

func readString(raw json.RawMessage) (any, error) {
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

func readInt32(raw json.RawMessage) (any, error) {
	n, err := strconv.ParseInt(string(raw), 10, 32)
	return int32(n), err
}

func readInt64(raw json.RawMessage) (any, error) {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err
}

// readFloat reads a number, or the names finite writes for NaN and the
// infinities.
func readFloat(raw json.RawMessage, bits int) (float64, error) {
	s := string(raw)
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
	}
	return strconv.ParseFloat(s, bits)
}

// readZoned reads io.debezium.time.ZonedTimestamp: ISO 8601, or
// (PostgreSQL) infinity and -infinity.
func readZoned(raw json.RawMessage) (any, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	switch s {
	case "infinity":
		return arrow.Timestamp(math.MaxInt64), nil
	case "-infinity":
		return arrow.Timestamp(math.MinInt64), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil, err
	}
	return arrow.Timestamp(t.UnixMicro()), nil
}

// readDecimal reads a Connect Decimal: base64 of the unscaled value's
// big-endian two's complement (the inverse of twosComplement).
func readDecimal(raw json.RawMessage) (any, error) {
	var b []byte
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, err
	}
	x := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	if x.BitLen() > 127 {
		return nil, fmt.Errorf("a decimal of %d bits does not fit 38 digits", x.BitLen())
	}
	return decimal128.FromBigInt(x), nil
}

// readRow reads a before or after object into values aligned with s's
// fields; nil for JSON null. Columns holding Debezium's unavailable-value
// placeholder are listed in unchanged (their value is nil).
func readRow(raw json.RawMessage, s *change.Schema, cols []column, which string) (vals []any, unchanged []string, err error) {
	if isNull(raw) {
		return nil, nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, nil, decodeErr(ReasonBadEnvelope, "%s is not an object: %v", which, err)
	}
	vals = make([]any, len(cols))
	for i, c := range cols {
		v, ok := obj[c.name]
		if !ok {
			return nil, nil, decodeErr(ReasonMissingColumn, "%s has no column %q, which its schema has", which, c.name)
		}
		if isNull(v) {
			continue
		}
		if c.unavailable != nil && bytes.Equal(v, c.unavailable) {
			unchanged = append(unchanged, c.name)
			continue
		}
		if vals[i], err = c.read(v); err != nil {
			return nil, nil, decodeErr(ReasonBadValue, "%s column %q (%s): value %s: %v", which, c.name, s.Fields[i].Type, clip(v), err)
		}
	}
	return vals, unchanged, nil
}

// clip shortens a value for an error message.
func clip(raw json.RawMessage) string {
	if len(raw) > 64 {
		return string(raw[:64]) + "…"
	}
	return string(raw)
}
