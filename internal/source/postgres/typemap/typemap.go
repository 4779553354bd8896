package typemap

import (
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/coltype"
)

// TypeInfo is what pg_type says about a type.
type TypeInfo struct {
	OID  uint32
	Name string // format_type-ish, e.g. "numeric", "_int4", "mood"
	Kind byte   // typtype: 'b' base, 'c' composite, 'd' domain, 'e' enum, 'p' pseudo, 'r' range, 'm' multirange
	// BaseOID is typbasetype: the type a domain is over (0 otherwise).
	BaseOID uint32
	// ElemOID is typelem for array types (typcategory = 'A'), 0 otherwise.
	// pg_type sets typelem for some non-arrays too (name, point): the
	// caller must not pass those on.
	ElemOID uint32
	// Delim is typdelim: the separator between elements of an array OF
	// this type (',' for everything built in except box, which uses ';').
	Delim byte
	// TypMod is typtypmod: the type modifier a domain applies to its base
	// type (-1 when none).
	TypMod int32
}

// Lookup returns TypeInfo for an OID. The caller backs it with a pg_type
// query and a cache; Map calls it only for types that are not built in, and
// may call it several times (domains, arrays) for one column.
type Lookup func(oid uint32) (TypeInfo, error)

// Column is a source column as PostgreSQL describes it (pg_attribute or a
// pgoutput Relation message). TypeMod is atttypmod: -1 when the column has
// none; for an array column it is the element's modifier.
type Column struct {
	Name    string
	TypeOID uint32
	TypeMod int32
}

// decodeFunc turns one value's text into its lake value. Its errors are
// reasons (never containing the value) that Decode wraps in a coltype.ValueError.
type decodeFunc func(text []byte) (any, error)

// kind is a resolved type: what a column or an array element becomes.
type kind struct {
	source string
	ice    iceberg.Type
	arrow  arrow.DataType
	dec    decodeFunc
	app    appendFunc // nil: AppendText decodes with dec, then AppendValue
	delim  byte       // typdelim, used when this type is an array element
	micros bool       // a time (a domain over one, a list of them) landing as TimeAsMicros
}

// Mapping decides one column's Iceberg type and decodes its text values.
// The zero Mapping is not usable; get one from Map.
type Mapping struct {
	column string
	k      kind
}

// maxDepth bounds domain/array resolution so that a catalog cycle (which
// PostgreSQL does not allow, but a broken Lookup could return) ends in an
// error instead of a stack overflow.
const maxDepth = 32

// TimeAs is how a `time without time zone` column lands in the lake
// (config time_as; docs/type-mapping.md, time columns and Spark).
type TimeAs string

const (
	// TimeAsTime lands time as Iceberg time (microseconds since midnight).
	// 24:00:00, which PostgreSQL allows, has no Iceberg time: such a row is
	// a dead letter. Spark 3.5 cannot read Iceberg time columns.
	TimeAsTime TimeAs = "time"
	// TimeAsText lands time as an Iceberg string holding PostgreSQL's text
	// of it, HH:MM:SS[.ffffff] (the fraction trimmed of trailing zeros),
	// 24:00:00 included.
	TimeAsText TimeAs = "text"
	// TimeAsMicros lands time as an Iceberg long: microseconds since
	// midnight, 0 to 86400000000 (24:00:00).
	TimeAsMicros TimeAs = "micros"
)

// TimeAsValues are the accepted TimeAs values, the default first.
var TimeAsValues = []TimeAs{TimeAsTime, TimeAsText, TimeAsMicros}

// Options choose between the mappings of the types that have more than
// one. The zero Options is the default mapping.
type Options struct {
	// TimeAs: "" is TimeAsTime.
	TimeAs TimeAs
}

// Map is Options{}.Map: every type takes its default mapping.
func Map(col Column, lookup Lookup) (Mapping, error) { return Options{}.Map(col, lookup) }

// Map resolves a column's type (following domains and arrays through
// lookup) and returns its Mapping. It fails only when the type cannot be
// resolved; every resolvable type has a mapping (string at worst).
func (o Options) Map(col Column, lookup Lookup) (Mapping, error) {
	k, err := o.resolve(col.TypeOID, col.TypeMod, lookup, 0)
	if err != nil {
		return Mapping{}, fmt.Errorf("can't map column %q (type oid %d): %w", col.Name, col.TypeOID, err)
	}
	return Mapping{column: col.Name, k: k}, nil
}

// IcebergType is the column's Iceberg type. A list's element field ID is a
// placeholder (0): the schema builder assigns real IDs
// (iceberg.AssignFreshSchemaIDs) as it does for every field. List elements
// are optional, because PostgreSQL arrays may hold NULLs.
func (m Mapping) IcebergType() iceberg.Type { return m.k.ice }

// ArrowType is the Arrow type matching IcebergType as iceberg-go's
// table.TypeToArrowType converts it (without field IDs, without large
// types). Decoded values append to a builder of this type.
func (m Mapping) ArrowType() arrow.DataType { return m.k.arrow }

// TimeMicros reports whether the column is a time, a domain over one, or
// a list of them, that lands as microseconds since midnight
// (TimeAsMicros): its values are int64 but its PostgreSQL input is a
// time's text.
func (m Mapping) TimeMicros() bool { return m.k.micros }

// SourceType names the PostgreSQL type as format_type would, e.g.
// "numeric(12,2)", "integer[]", "mood"; for docs and error messages.
func (m Mapping) SourceType() string { return m.k.source }

// Decode turns PostgreSQL's text output of one value (under
// SessionSettings) into the lake value. text == nil is SQL NULL and
// decodes to (nil, nil). The result is one of int32, int64, float32,
// float64, bool, string, []byte, decimal128.Num, arrow.Date32,
// arrow.Time64, arrow.Timestamp, or []any (lists, nil for NULL elements),
// and never aliases text. A value with no exact representation returns a
// *coltype.ValueError.
func (m Mapping) Decode(text []byte) (any, error) {
	if m.k.dec == nil {
		return nil, errors.New("typemap: Decode on a zero Mapping")
	}
	if text == nil {
		return nil, nil
	}
	v, err := m.k.dec(text)
	if err != nil {
		return nil, &coltype.ValueError{Column: m.column, Type: m.k.source, Reason: err.Error()}
	}
	return v, nil
}

// SessionSettings returns the session settings (GUCs) under which the text
// output of every value is what Decode expects. Set them as RuntimeParams
// of every connection that reads values: the replication connection
// (pgoutput formats values in the walsender's session) and snapshot
// connections alike. The map is fresh on every call.
func SessionSettings() map[string]string {
	return map[string]string{
		"DateStyle":          "ISO, MDY",
		"TimeZone":           "UTC",
		"IntervalStyle":      "iso_8601",
		"extra_float_digits": "3",
		"bytea_output":       "hex",
		"lc_monetary":        "C",
		// Text is sent in the client encoding; Iceberg strings are UTF-8.
		"client_encoding": "UTF8",
	}
}
