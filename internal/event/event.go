package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/change"
)

// Shape names a JSON form of an event.
type Shape string

// The shapes (see the package comment).
const (
	Tidemark Shape = "tidemark"
	Debezium Shape = "debezium"
	Beam     Shape = "beam"
)

// Shapes lists every shape, the default first.
var Shapes = []Shape{Tidemark, Debezium, Beam}

// ParseShape reads a shape's name; the error names the allowed values.
func ParseShape(s string) (Shape, error) {
	for _, sh := range Shapes {
		if strings.EqualFold(s, string(sh)) {
			return sh, nil
		}
	}
	names := make([]string, len(Shapes))
	for i, sh := range Shapes {
		names[i] = string(sh)
	}
	return "", fmt.Errorf("unknown event format %q: want one of %s", s, strings.Join(names, ", "))
}

// Connector names of the sources, as Debezium names its connectors.
const (
	PostgreSQL = "postgresql"
	MySQL      = "mysql"
)

// Options say how an Encoder writes.
type Options struct {
	Shape Shape
	// Schema: the debezium shape's {"schema": ..., "payload": ...} form
	// (Kafka Connect's JsonConverter with schemas.enable). Other shapes
	// ignore it.
	Schema bool
	// Connector is the source's kind: PostgreSQL or MySQL.
	Connector string
	// Name is the logical server name (Debezium's topic prefix): the
	// pipeline's name.
	Name string
	// Database is the source database's name.
	Database string
	// Version goes to source.version (debezium) and metadata.version
	// (beam): the tidemark version.
	Version string
	// Binlog splits a MySQL commit position (cdc_source_lsn) into the
	// binlog file's name (mysql-bin.000007) and the offset in it. The
	// composition root supplies the source's (this package knows no
	// source); nil for sources without binlog files.
	Binlog func(lsn uint64) (file string, pos uint32)
	// Now is the clock of the events' ts_ms (when tidemark processed
	// them); nil is time.Now.
	Now func() time.Time
}

// Encoder turns changes into one JSON document each, in Options.Shape.
type Encoder struct {
	o Options
	// schemas caches the debezium value schema of each change.Schema
	// (immutable, shared by pointer) per table.
	schemas map[schemaKey]object
}

type schemaKey struct {
	s *change.Schema
	t change.TableID
}

// NewEncoder checks o and returns its encoder.
func NewEncoder(o Options) (*Encoder, error) {
	if o.Shape == "" {
		o.Shape = Tidemark
	}
	if _, err := ParseShape(string(o.Shape)); err != nil {
		return nil, err
	}
	switch o.Connector {
	case PostgreSQL, MySQL:
	default:
		return nil, fmt.Errorf("event: unknown connector %q (want %s or %s)", o.Connector, PostgreSQL, MySQL)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Encoder{o: o, schemas: map[schemaKey]object{}}, nil
}

// Shape is the encoder's shape.
func (e *Encoder) Shape() Shape { return e.o.Shape }

// Change encodes one row change (insert, update, delete, snapshot read,
// truncate). The result has no trailing newline.
func (e *Encoder) Change(c *change.Change) ([]byte, error) {
	switch e.o.Shape {
	case Debezium:
		return e.debeziumChange(c)
	case Beam:
		return marshal(e.beamChange(c))
	}
	return marshal(e.tidemarkChange(c))
}

// DeadLetter encodes a row that could not be decoded exactly.
func (e *Encoder) DeadLetter(d change.DeadLetter) ([]byte, error) {
	switch e.o.Shape {
	case Debezium:
		return e.debeziumDeadLetter(d)
	case Beam:
		return marshal(e.beamDeadLetter(d))
	}
	return marshal(e.tidemarkDeadLetter(d))
}

// Message encodes a logical decoding message (PostgreSQL's
// pg_logical_emit_message).
func (e *Encoder) Message(m change.Message) ([]byte, error) {
	switch e.o.Shape {
	case Debezium:
		return e.debeziumMessage(m)
	case Beam:
		return marshal(e.beamMessage(m))
	}
	return marshal(e.tidemarkMessage(m))
}

// position prints p as the source prints its positions: PostgreSQL's
// pg_lsn (16/B374D848), MySQL's binlog file:offset; then :seq.
func (e *Encoder) position(p change.Position) string {
	if e.o.Connector == MySQL {
		file, pos := e.binlog(p.LSN)
		return fmt.Sprintf("%s:%d:%d", file, pos, p.Seq)
	}
	return p.String()
}

// binlog is Options.Binlog, or (when it is not given) the file's number
// as a basename-less server prints it (000007) and the offset.
func (e *Encoder) binlog(lsn uint64) (string, uint32) {
	if e.o.Binlog != nil {
		return e.o.Binlog(lsn)
	}
	return fmt.Sprintf("%06d", lsn>>32), uint32(lsn)
}

// object is a JSON object whose keys keep their order (the columns'
// order, the order of Debezium's schemas).
type object []member

type member struct {
	k string
	v any
}

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.k)
		b.Write(k)
		b.WriteByte(':')
		v, err := marshal(m.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.k, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshal is json.Marshal without HTML escaping (<, >, & stay as they are
// in the data).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// row is a table row as an object of column → value(field, value),
// in the columns' order; unchanged columns get unavailable(field) instead.
func row(s *change.Schema, vals []any, unchanged []string, value func(change.Field, any) any, unavailable func(change.Field) any) object {
	if s == nil || vals == nil {
		return nil
	}
	o := make(object, 0, len(s.Fields))
	for i, f := range s.Fields {
		if i >= len(vals) {
			break
		}
		v := vals[i]
		if contains(unchanged, f.Name) {
			if unavailable == nil {
				o = append(o, member{f.Name, nil})
			} else {
				o = append(o, member{f.Name, unavailable(f)})
			}
			continue
		}
		o = append(o, member{f.Name, value(f, v)})
	}
	return o
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// nullable turns a nil object into JSON null (a nil slice of a named type
// in an `any` is not nil).
func nullable(o object) any {
	if o == nil {
		return nil
	}
	return o
}

// before is the old row a change carries: the source's old tuple, or for
// a delete the row as Values holds it (the key with the default replica
// identity).
func before(c *change.Change) []any {
	if c.Before != nil {
		return c.Before
	}
	if c.Op == change.OpDelete {
		return c.Values
	}
	return nil
}

// after is the new row, nil for a delete or a truncate.
func after(c *change.Change) []any {
	if c.Op == change.OpDelete || c.Op == change.OpTruncate {
		return nil
	}
	return c.Values
}
