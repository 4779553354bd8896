package typemap

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/jackc/pgx/v5/pgtype"
)

// Built-in OIDs that pgtype does not name.
const (
	moneyOID         = 790
	moneyArrayOID    = 791
	lsegArrayOID     = 1018
	macaddr8ArrayOID = 775
	tsqueryOID       = 3615
	tsqueryArrayOID  = 3645
	pgLsnOID         = 3220
	pgLsnArrayOID    = 3221
)

// builtinNames are format_type's names of the built-in types resolved
// without a Lookup. Read-only.
var builtinNames = map[uint32]string{
	pgtype.BoolOID:           "boolean",
	pgtype.ByteaOID:          "bytea",
	pgtype.QCharOID:          `"char"`,
	pgtype.NameOID:           "name",
	pgtype.Int8OID:           "bigint",
	pgtype.Int2OID:           "smallint",
	pgtype.Int4OID:           "integer",
	pgtype.TextOID:           "text",
	pgtype.OIDOID:            "oid",
	pgtype.TIDOID:            "tid",
	pgtype.XIDOID:            "xid",
	pgtype.CIDOID:            "cid",
	pgtype.JSONOID:           "json",
	pgtype.XMLOID:            "xml",
	pgtype.PointOID:          "point",
	pgtype.LsegOID:           "lseg",
	pgtype.PathOID:           "path",
	pgtype.BoxOID:            "box",
	pgtype.PolygonOID:        "polygon",
	pgtype.LineOID:           "line",
	pgtype.CIDROID:           "cidr",
	pgtype.Float4OID:         "real",
	pgtype.Float8OID:         "double precision",
	pgtype.CircleOID:         "circle",
	pgtype.Macaddr8OID:       "macaddr8",
	moneyOID:                 "money",
	pgtype.MacaddrOID:        "macaddr",
	pgtype.InetOID:           "inet",
	pgtype.BPCharOID:         "bpchar", // "character(n)" with a typmod
	pgtype.VarcharOID:        "character varying",
	pgtype.DateOID:           "date",
	pgtype.TimeOID:           "time without time zone",
	pgtype.TimestampOID:      "timestamp without time zone",
	pgtype.TimestamptzOID:    "timestamp with time zone",
	pgtype.IntervalOID:       "interval",
	pgtype.TimetzOID:         "time with time zone",
	pgtype.BitOID:            `"bit"`, // "bit(n)" with a typmod
	pgtype.VarbitOID:         "bit varying",
	pgtype.NumericOID:        "numeric",
	pgtype.UUIDOID:           "uuid",
	pgLsnOID:                 "pg_lsn",
	pgtype.TSVectorOID:       "tsvector",
	tsqueryOID:               "tsquery",
	pgtype.JSONBOID:          "jsonb",
	pgtype.JSONPathOID:       "jsonpath",
	pgtype.XID8OID:           "xid8",
	pgtype.Int4rangeOID:      "int4range",
	pgtype.NumrangeOID:       "numrange",
	pgtype.TsrangeOID:        "tsrange",
	pgtype.TstzrangeOID:      "tstzrange",
	pgtype.DaterangeOID:      "daterange",
	pgtype.Int8rangeOID:      "int8range",
	pgtype.Int4multirangeOID: "int4multirange",
	pgtype.NummultirangeOID:  "nummultirange",
	pgtype.TsmultirangeOID:   "tsmultirange",
	pgtype.TstzmultirangeOID: "tstzmultirange",
	pgtype.DatemultirangeOID: "datemultirange",
	pgtype.Int8multirangeOID: "int8multirange",
}

// builtinArrays maps the array types of builtinNames to their element
// type. Read-only.
var builtinArrays = map[uint32]uint32{
	pgtype.BoolArrayOID:           pgtype.BoolOID,
	pgtype.ByteaArrayOID:          pgtype.ByteaOID,
	pgtype.QCharArrayOID:          pgtype.QCharOID,
	pgtype.NameArrayOID:           pgtype.NameOID,
	pgtype.Int8ArrayOID:           pgtype.Int8OID,
	pgtype.Int2ArrayOID:           pgtype.Int2OID,
	pgtype.Int4ArrayOID:           pgtype.Int4OID,
	pgtype.TextArrayOID:           pgtype.TextOID,
	pgtype.OIDArrayOID:            pgtype.OIDOID,
	pgtype.TIDArrayOID:            pgtype.TIDOID,
	pgtype.XIDArrayOID:            pgtype.XIDOID,
	pgtype.CIDArrayOID:            pgtype.CIDOID,
	pgtype.JSONArrayOID:           pgtype.JSONOID,
	pgtype.XMLArrayOID:            pgtype.XMLOID,
	pgtype.PointArrayOID:          pgtype.PointOID,
	lsegArrayOID:                  pgtype.LsegOID,
	pgtype.PathArrayOID:           pgtype.PathOID,
	pgtype.BoxArrayOID:            pgtype.BoxOID,
	pgtype.PolygonArrayOID:        pgtype.PolygonOID,
	pgtype.LineArrayOID:           pgtype.LineOID,
	pgtype.CIDRArrayOID:           pgtype.CIDROID,
	pgtype.Float4ArrayOID:         pgtype.Float4OID,
	pgtype.Float8ArrayOID:         pgtype.Float8OID,
	pgtype.CircleArrayOID:         pgtype.CircleOID,
	macaddr8ArrayOID:              pgtype.Macaddr8OID,
	moneyArrayOID:                 moneyOID,
	pgtype.MacaddrArrayOID:        pgtype.MacaddrOID,
	pgtype.InetArrayOID:           pgtype.InetOID,
	pgtype.BPCharArrayOID:         pgtype.BPCharOID,
	pgtype.VarcharArrayOID:        pgtype.VarcharOID,
	pgtype.DateArrayOID:           pgtype.DateOID,
	pgtype.TimeArrayOID:           pgtype.TimeOID,
	pgtype.TimestampArrayOID:      pgtype.TimestampOID,
	pgtype.TimestamptzArrayOID:    pgtype.TimestamptzOID,
	pgtype.IntervalArrayOID:       pgtype.IntervalOID,
	pgtype.TimetzArrayOID:         pgtype.TimetzOID,
	pgtype.BitArrayOID:            pgtype.BitOID,
	pgtype.VarbitArrayOID:         pgtype.VarbitOID,
	pgtype.NumericArrayOID:        pgtype.NumericOID,
	pgtype.UUIDArrayOID:           pgtype.UUIDOID,
	pgLsnArrayOID:                 pgLsnOID,
	pgtype.TSVectorArrayOID:       pgtype.TSVectorOID,
	tsqueryArrayOID:               tsqueryOID,
	pgtype.JSONBArrayOID:          pgtype.JSONBOID,
	pgtype.JSONPathArrayOID:       pgtype.JSONPathOID,
	pgtype.XID8ArrayOID:           pgtype.XID8OID,
	pgtype.Int4rangeArrayOID:      pgtype.Int4rangeOID,
	pgtype.NumrangeArrayOID:       pgtype.NumrangeOID,
	pgtype.TsrangeArrayOID:        pgtype.TsrangeOID,
	pgtype.TstzrangeArrayOID:      pgtype.TstzrangeOID,
	pgtype.DaterangeArrayOID:      pgtype.DaterangeOID,
	pgtype.Int8rangeArrayOID:      pgtype.Int8rangeOID,
	pgtype.Int4multirangeArrayOID: pgtype.Int4multirangeOID,
	pgtype.NummultirangeArrayOID:  pgtype.NummultirangeOID,
	pgtype.TsmultirangeArrayOID:   pgtype.TsmultirangeOID,
	pgtype.TstzmultirangeArrayOID: pgtype.TstzmultirangeOID,
	pgtype.DatemultirangeArrayOID: pgtype.DatemultirangeOID,
	pgtype.Int8multirangeArrayOID: pgtype.Int8multirangeOID,
}

// resolve turns a type OID and modifier into a kind.
func (o Options) resolve(oid uint32, typmod int32, lookup Lookup, depth int) (kind, error) {
	if depth > maxDepth {
		return kind{}, errors.New("type nesting deeper than 32 levels (domain or array cycle?)")
	}
	if name, ok := builtinNames[oid]; ok {
		k := o.builtinKind(oid, typmod, name)
		k.delim = ','
		if oid == pgtype.BoxOID {
			k.delim = ';'
		}
		return k, nil
	}
	if elem, ok := builtinArrays[oid]; ok {
		ek, err := o.resolve(elem, typmod, lookup, depth+1)
		if err != nil {
			return kind{}, err
		}
		return listKind(ek), nil
	}
	if lookup == nil {
		return kind{}, fmt.Errorf("type oid %d is not built in and no Lookup was given", oid)
	}
	info, err := lookup(oid)
	if err != nil {
		return kind{}, fmt.Errorf("can't look up type oid %d: %w", oid, err)
	}
	delim := info.Delim
	if delim == 0 {
		delim = ','
	}
	switch {
	case info.Kind == 'd':
		if info.BaseOID == 0 {
			return kind{}, fmt.Errorf("domain %s (oid %d) has no base type", info.Name, oid)
		}
		// A domain column carries no typmod of its own (atttypmod is
		// -1); the domain's typtypmod is what constrains its values.
		if info.TypMod != -1 {
			typmod = info.TypMod
		}
		bk, err := o.resolve(info.BaseOID, typmod, lookup, depth+1)
		if err != nil {
			return kind{}, fmt.Errorf("domain %s: %w", info.Name, err)
		}
		bk.source = info.Name
		bk.delim = delim
		return bk, nil
	case info.ElemOID != 0:
		ek, err := o.resolve(info.ElemOID, typmod, lookup, depth+1)
		if err != nil {
			return kind{}, err
		}
		k := listKind(ek)
		k.delim = delim
		return k, nil
	default:
		// Enums, composites, ranges, multiranges, extension types: their
		// text output is the lossless representation.
		k := stringKind(info.Name)
		k.delim = delim
		return k, nil
	}
}

// builtinKind is the mapping of a built-in scalar type.
func (o Options) builtinKind(oid uint32, typmod int32, name string) kind {
	source := formatType(oid, typmod, name)
	switch oid {
	case pgtype.Int2OID, pgtype.Int4OID:
		return scalarKind[int32, *array.Int32Builder](source, iceberg.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int32, parseInt32)
	case pgtype.Int8OID:
		return scalarKind[int64, *array.Int64Builder](source, iceberg.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int64, parseInt64)
	case pgtype.OIDOID, pgtype.XIDOID, pgtype.CIDOID:
		return scalarKind[int64, *array.Int64Builder](source, iceberg.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int64, parseUint32)
	case pgtype.XID8OID:
		return scalarKind[int64, *array.Int64Builder](source, iceberg.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int64, parseUint63)
	case pgtype.Float4OID:
		return scalarKind[float32, *array.Float32Builder](source, iceberg.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float32, parseFloat32)
	case pgtype.Float8OID:
		return scalarKind[float64, *array.Float64Builder](source, iceberg.PrimitiveTypes.Float64, arrow.PrimitiveTypes.Float64, parseFloat64)
	case pgtype.BoolOID:
		return scalarKind[bool, *array.BooleanBuilder](source, iceberg.PrimitiveTypes.Bool, arrow.FixedWidthTypes.Boolean, parseBool)
	case pgtype.ByteaOID:
		return scalarKind[[]byte, *array.BinaryBuilder](source, iceberg.PrimitiveTypes.Binary, arrow.BinaryTypes.Binary, parseBytea)
	case pgtype.DateOID:
		return scalarKind[arrow.Date32, *array.Date32Builder](source, iceberg.PrimitiveTypes.Date, arrow.FixedWidthTypes.Date32, parseDate)
	case pgtype.TimeOID:
		switch o.TimeAs {
		case TimeAsText:
			return stringKind(source)
		case TimeAsMicros:
			k := scalarKind[int64, *array.Int64Builder](source, iceberg.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int64, parseTimeMicros)
			k.micros = true
			return k
		}
		return scalarKind[arrow.Time64, *array.Time64Builder](source, iceberg.PrimitiveTypes.Time, arrow.FixedWidthTypes.Time64us, parseTime)
	case pgtype.TimestampOID:
		return scalarKind[arrow.Timestamp, *array.TimestampBuilder](source, iceberg.PrimitiveTypes.Timestamp, &arrow.TimestampType{Unit: arrow.Microsecond}, parseTimestampNaive)
	case pgtype.TimestamptzOID:
		return scalarKind[arrow.Timestamp, *array.TimestampBuilder](source, iceberg.PrimitiveTypes.TimestampTz, arrow.FixedWidthTypes.Timestamp_us, parseTimestamptz)
	case pgtype.NumericOID:
		if p, s, ok := decimalOf(typmod); ok {
			parse := decimalParser(p, s)
			return kind{
				source: source,
				ice:    iceberg.DecimalTypeOf(int(p), int(s)),
				arrow:  &arrow.Decimal128Type{Precision: p, Scale: s},
				dec:    boxed(parse),
				app:    appendDecimal(parse),
			}
		}
	}
	return stringKind(source)
}

func stringKind(source string) kind {
	return kind{source: source, ice: iceberg.PrimitiveTypes.String, arrow: arrow.BinaryTypes.String, dec: decodeString, app: appendString}
}

func listKind(elem kind) kind {
	return kind{
		source: elem.source + "[]",
		ice:    &iceberg.ListType{Element: elem.ice, ElementRequired: false},
		arrow:  arrow.ListOfField(arrow.Field{Name: "element", Type: elem.arrow, Nullable: true}),
		dec:    arrayDecoder(elem.dec, elem.delim),
		delim:  ',',
		micros: elem.micros,
	}
}

// decimalOf returns the Iceberg decimal that holds every value of
// numeric(typmod) exactly, or ok=false when there is none (unconstrained,
// or more than 38 digits).
//
// PostgreSQL 15 allows a scale above the precision (numeric(2,5) holds
// |x| < 0.001) and a negative scale (numeric(2,-3) holds multiples of 1000
// below 100000). Iceberg scales are 0..precision, so numeric(p,s) becomes
// decimal(s,s) when s > p and decimal(p-s,0) when s < 0: the smallest
// decimal that holds every value.
func decimalOf(typmod int32) (p, s int32, ok bool) {
	if typmod < 4 { // VARHDRSZ: anything below is "no typmod"
		return 0, 0, false
	}
	t := typmod - 4
	p = (t >> 16) & 0xffff
	s = ((t & 0x7ff) ^ 1024) - 1024
	switch {
	case s < 0:
		p, s = p-s, 0
	case s > p:
		p = s
	}
	if p < 1 || p > 38 {
		return 0, 0, false
	}
	return p, s, true
}

// formatType renders a type the way PostgreSQL's format_type does for
// the built-in types whose modifier matters.
func formatType(oid uint32, typmod int32, name string) string {
	if typmod < 0 {
		return name
	}
	switch oid {
	case pgtype.NumericOID:
		if typmod < 4 {
			return name
		}
		t := typmod - 4
		return fmt.Sprintf("numeric(%d,%d)", (t>>16)&0xffff, ((t&0x7ff)^1024)-1024)
	case pgtype.BPCharOID:
		return fmt.Sprintf("character(%d)", typmod-4)
	case pgtype.VarcharOID:
		return fmt.Sprintf("character varying(%d)", typmod-4)
	case pgtype.BitOID:
		return fmt.Sprintf("bit(%d)", typmod)
	case pgtype.VarbitOID:
		return fmt.Sprintf("bit varying(%d)", typmod)
	case pgtype.TimeOID:
		return fmt.Sprintf("time(%d) without time zone", typmod)
	case pgtype.TimetzOID:
		return fmt.Sprintf("time(%d) with time zone", typmod)
	case pgtype.TimestampOID:
		return fmt.Sprintf("timestamp(%d) without time zone", typmod)
	case pgtype.TimestamptzOID:
		return fmt.Sprintf("timestamp(%d) with time zone", typmod)
	case pgtype.IntervalOID:
		return "interval" + intervalTypmod(typmod)
	}
	return name
}

// intervalTypmod renders an interval modifier: a field range in the high
// 16 bits, a precision (0xFFFF: none) in the low ones.
func intervalTypmod(typmod int32) string {
	const (
		month, year, day, hour, minute, second = 1 << 1, 1 << 2, 1 << 3, 1 << 10, 1 << 11, 1 << 12
		fullRange                              = 0x7FFF
	)
	fields := map[int32]string{
		year: " year", month: " month", day: " day", hour: " hour", minute: " minute", second: " second",
		year | month:                 " year to month",
		day | hour:                   " day to hour",
		day | hour | minute:          " day to minute",
		day | hour | minute | second: " day to second",
		hour | minute:                " hour to minute",
		hour | minute | second:       " hour to second",
		minute | second:              " minute to second",
		fullRange:                    "",
	}
	r, prec := (typmod>>16)&0x7FFF, typmod&0xFFFF
	out := fields[r]
	if prec != 0xFFFF {
		out += "(" + strconv.Itoa(int(prec)) + ")"
	}
	return out
}
