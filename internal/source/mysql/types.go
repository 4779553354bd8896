package mysql

// The type mapping of MySQL and MariaDB columns (docs/type-mapping.md, the
// MySQL section, has the full table; testdata/mysql_types.golden shows it
// on a real MariaDB).
//
// A value reaches tidemark by two roads: the binlog, as the Go values
// go-mysql's replication.RowsEvent decodes (int8 for a tinyint whatever
// its sign, an int64 bitmask for a SET, a string for a DATE, ...), and the
// snapshot, as the text protocol's bytes (database/sql with
// go-sql-driver/mysql, sql.RawBytes). A Mapping turns both into the same
// lake value, byte for byte: DecodeBinlog and DecodeText of one row give
// equal results (a test checks every type against a real MariaDB).
//
// The rules:
//
//   - A type becomes the narrowest Iceberg type that holds every one of its
//     values exactly: unsigned integers widen (int unsigned -> long, bigint
//     unsigned -> decimal(20,0)), decimal(p,s) up to 38 digits stays a
//     decimal, wider ones become their exact text.
//   - Values are never approximated: a zero date, an invalid date stored
//     under ALLOW_INVALID_DATES, text that is not valid in its character
//     set, return a *coltype.ValueError, and the capture routes the row to
//     the dead-letter table with that reason.
//   - A value of a Go type the binlog cannot give for the column (the
//     column's definition and the binlog disagree: a schema change not yet
//     applied) is a *BinlogTypeError, not a dead letter: the capture must
//     stop rather than store values under the wrong type.
//
// A capture uses it so:
//
//  1. LoadColumns reads a table's columns (ordinal order) and key.
//  2. Each binlog TableMapEvent of the table goes through ApplyTableMap
//     (exact enum/set members, MariaDB 5.3 temporal columns), then Map
//     makes each column's Mapping; Field gives the change.Field.
//  3. The BinlogSyncerConfig goes through SyncerSettings; a row event's
//     row[i] goes through Mappings[i].DecodeBinlog.
//  4. Snapshot connections run under SessionVariables (CheckSession says
//     whether one does); the chunk SELECT lists each column's SelectExpr,
//     and each sql.RawBytes goes through AppendText into a builder of
//     ArrowType (or DecodeText).
//  5. A *coltype.ValueError is a dead letter (its Reason, and the raw row:
//     the SELECT text or BinlogText of each value); a *BinlogTypeError or
//     an *UnsupportedTypeError stops the capture.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/tidemark/tidemark/internal/change"
)

// Column is a MySQL column as information_schema.COLUMNS describes it.
// LoadColumns fills every field; a caller that builds a Column from DDL
// sets DataType, ColumnType, Charset and the nullability/generation fields
// and calls ParseColumnType for the rest.
type Column struct {
	// Schema and Table name the column's table, for messages.
	Schema, Table string
	Name          string
	// Ordinal is ORDINAL_POSITION (1-based): the column's place in a row
	// image of the binlog.
	Ordinal int
	// DataType is DATA_TYPE in lower case: "int", "varchar", "enum", ...
	// MariaDB reports its JSON as "longtext" (it is one, with a CHECK).
	DataType string
	// ColumnType is COLUMN_TYPE verbatim: "int(10) unsigned",
	// "enum('a','b')", "decimal(12,2)"; the source type in messages.
	ColumnType string
	// Unsigned and Zerofill are the attributes of ColumnType.
	Unsigned, Zerofill bool
	// Elements are the members of an enum or set, unescaped, in definition
	// order (enum index i+1, set bit i). MariaDB's information_schema is
	// utf8mb3: a member with a character outside the BMP (an emoji) reads
	// there as '?'. The table map event of the binlog carries them exactly
	// (binlog_row_metadata=FULL: TableMapEvent.EnumStrValueString /
	// SetStrValueString); a capture should set Elements from it.
	Elements []string
	// Precision and Scale are NUMERIC_PRECISION and NUMERIC_SCALE (digits
	// for decimal, bits for bit); 0 when NULL.
	Precision, Scale int
	// DatetimePrecision is DATETIME_PRECISION: fractional digits of time,
	// datetime and timestamp.
	DatetimePrecision int
	// MaxLength is CHARACTER_MAXIMUM_LENGTH: characters for text, bytes for
	// binary(n) and varbinary(n); 0 when NULL.
	MaxLength int64
	// Charset and Collation are CHARACTER_SET_NAME and COLLATION_NAME; ""
	// for a type without a character set.
	Charset, Collation string
	Nullable           bool
	// Generated is "VIRTUAL" or "STORED" for a generated column, "" else.
	// Both kinds are in MariaDB's row images (binlog_row_image=FULL), so
	// both are captured like any column.
	Generated string
	// Extra is EXTRA verbatim ("auto_increment", "VIRTUAL GENERATED", ...).
	Extra string
	// OldTemporal marks a time, datetime or timestamp column stored in
	// MariaDB 5.3's format (SHOW CREATE TABLE shows /* mariadb-5.3 */; the
	// binlog types it MYSQL_TYPE_TIME, _DATETIME, _TIMESTAMP): go-mysql
	// reads its negative times as large positive ones and cannot read its
	// fractional seconds at all. LoadColumns and ApplyTableMap set it.
	OldTemporal bool
	// Default is COLUMN_DEFAULT verbatim: an SQL expression in MariaDB
	// ('abc', 12, current_timestamp()), the value's text in MySQL; nil for
	// none (NULL, or MariaDB's expression NULL). Not interpreted here.
	Default *string
	// TimeAs is how a time column lands: "" or TimeAsMicros (long
	// microseconds) or TimeAsText (its text). The capture sets it from
	// Options.TimeAs; LoadColumns leaves it empty.
	TimeAs string
}

// ID names the column as schema.table.column, for messages.
func (c *Column) ID() string {
	return c.Schema + "." + c.Table + "." + c.Name
}

// ParseColumnType sets DataType (when empty), Unsigned, Zerofill and
// Elements from ColumnType, and Precision, Scale, DatetimePrecision and
// MaxLength from its modifiers when they are zero, so that a Column read
// from DDL maps as one read from information_schema.
func (c *Column) ParseColumnType() error {
	ct := strings.TrimSpace(c.ColumnType)
	base, args, rest, err := splitColumnType(ct)
	if err != nil {
		return fmt.Errorf("column %s: COLUMN_TYPE %q: %w", c.ID(), c.ColumnType, err)
	}
	if c.DataType == "" {
		c.DataType = strings.ToLower(base)
	}
	for _, attr := range strings.Fields(strings.ToLower(rest)) {
		switch attr {
		case "unsigned":
			c.Unsigned = true
		case "zerofill":
			c.Zerofill = true
		}
	}
	switch c.DataType {
	case "enum", "set":
		if args == "" {
			return fmt.Errorf("column %s: COLUMN_TYPE %q has no members", c.ID(), c.ColumnType)
		}
		els, err := parseElements(args)
		if err != nil {
			return fmt.Errorf("column %s: COLUMN_TYPE %q: %w", c.ID(), c.ColumnType, err)
		}
		c.Elements = els
		return nil
	}
	if args == "" {
		return nil
	}
	nums := strings.Split(args, ",")
	n0, err := strconv.Atoi(strings.TrimSpace(nums[0]))
	if err != nil {
		return fmt.Errorf("column %s: COLUMN_TYPE %q: bad modifier", c.ID(), c.ColumnType)
	}
	n1 := 0
	if len(nums) > 1 {
		if n1, err = strconv.Atoi(strings.TrimSpace(nums[1])); err != nil {
			return fmt.Errorf("column %s: COLUMN_TYPE %q: bad modifier", c.ID(), c.ColumnType)
		}
	}
	switch c.DataType {
	case "decimal", "numeric", "bit":
		if c.Precision == 0 {
			c.Precision, c.Scale = n0, n1
		}
	case "time", "datetime", "timestamp":
		if c.DatetimePrecision == 0 {
			c.DatetimePrecision = n0
		}
	case "char", "varchar", "binary", "varbinary":
		if c.MaxLength == 0 {
			c.MaxLength = int64(n0)
		}
	}
	return nil
}

// splitColumnType splits "decimal(10,2) unsigned zerofill" into "decimal",
// "10,2" and " unsigned zerofill", honouring quotes inside the parentheses
// (enum members may hold parentheses).
func splitColumnType(ct string) (base, args, rest string, err error) {
	open := strings.IndexAny(ct, "( ")
	if open < 0 {
		return ct, "", "", nil
	}
	if ct[open] == ' ' {
		return ct[:open], "", ct[open:], nil
	}
	inQuote := false
	for i := open + 1; i < len(ct); i++ {
		switch c := ct[i]; {
		case inQuote && c == '\\':
			i++
		case c == '\'':
			inQuote = !inQuote // '' inside a member toggles twice
		case !inQuote && c == ')':
			return ct[:open], ct[open+1 : i], ct[i+1:], nil
		}
	}
	return "", "", "", errors.New("unbalanced parentheses")
}

// parseElements reads 'a','b c','it”s' as COLUMN_TYPE writes enum and set
// members: quotes doubled, and \\, \n, \r, \0 escaped (append_unescaped);
// other backslash escapes of SQL string syntax are accepted too.
func parseElements(args string) ([]string, error) {
	var (
		out []string
		b   strings.Builder
	)
	i := 0
	for {
		for i < len(args) && args[i] == ' ' {
			i++
		}
		if i >= len(args) || args[i] != '\'' {
			return nil, errors.New("malformed member list")
		}
		i++
		b.Reset()
		closed := false
		for i < len(args) && !closed {
			c := args[i]
			switch {
			case c == '\'' && i+1 < len(args) && args[i+1] == '\'':
				b.WriteByte('\'')
				i += 2
			case c == '\'':
				closed = true
				i++
			case c == '\\' && i+1 < len(args):
				switch e := args[i+1]; e {
				case '0':
					b.WriteByte(0)
				case 'n':
					b.WriteByte('\n')
				case 'r':
					b.WriteByte('\r')
				case 't':
					b.WriteByte('\t')
				case 'b':
					b.WriteByte('\b')
				case 'Z':
					b.WriteByte(26)
				default:
					b.WriteByte(e)
				}
				i += 2
			default:
				b.WriteByte(c)
				i++
			}
		}
		if !closed {
			return nil, errors.New("unterminated member")
		}
		out = append(out, b.String())
		for i < len(args) && args[i] == ' ' {
			i++
		}
		if i == len(args) {
			return out, nil
		}
		if args[i] != ',' {
			return nil, errors.New("malformed member list")
		}
		i++
	}
}

// ErrUnsupportedType is what every *UnsupportedTypeError matches with
// errors.Is.
var ErrUnsupportedType = errors.New("unsupported MySQL column type")

// UnsupportedTypeError is a column MapColumn cannot map. Its message names
// the column, its type, why, and what the operator can do.
type UnsupportedTypeError struct {
	Column string // schema.table.column
	Type   string // COLUMN_TYPE
	Reason string
}

func (e *UnsupportedTypeError) Error() string {
	return fmt.Sprintf("can't map column %s of type %s: %s; change the column's type "+
		"(ALTER TABLE … MODIFY) or leave the table out of the capture (--tables / tables:)",
		e.Column, e.Type, e.Reason)
}

func (e *UnsupportedTypeError) Is(target error) bool { return target == ErrUnsupportedType }

// kind is what a column becomes; each has its own decoders.
type kind uint8

const (
	kInt32       kind = iota // tinyint, smallint, mediumint (either sign), int
	kUint32                  // int unsigned -> long
	kInt64                   // bigint
	kUint64                  // bigint unsigned -> decimal(20,0)
	kDecimal                 // decimal(p<=38,s)
	kDecimalText             // decimal(p>38,s) -> string
	kFloat32                 // float
	kFloat64                 // double, real
	kBit                     // bit(1..63) -> long
	kBit64                   // bit(64) -> decimal(20,0)
	kEnum                    // -> string (the member)
	kSet                     // -> string (members joined by ',')
	kYear                    // -> int
	kDate                    // -> date
	kDatetime                // -> timestamp (no zone)
	kTimestamp               // -> timestamptz (UTC)
	kTime                    // -> long (signed microseconds)
	kText                    // char, varchar, *text -> string
	kJSON                    // MySQL json -> string
	kBinary                  // varbinary, *blob -> binary
	kBinaryFixed             // binary(n) -> binary (n bytes)
	kGeometry                // spatial -> binary (WKB / EWKB)
	kUUID                    // MariaDB uuid -> string
	kInet4                   // MariaDB inet4 -> string
	kInet6                   // MariaDB inet6 -> string
	kTimeText                // time under time_as text -> string
)

// Mapping is one column's lake type and its decoders. Get one from Map;
// it is immutable and safe for concurrent use.
type Mapping struct {
	col    string // schema.table.column, for errors
	name   string
	source string // COLUMN_TYPE
	k      kind
	ice    iceberg.Type
	arrow  arrow.DataType
	// bits is the width of an integer type (8, 16, 24, 32, 64) or of a
	// bit(n); length is binary(n)'s n.
	bits     int
	unsigned bool
	oldTime  bool // a time column in MariaDB 5.3's format
	length   int
	prec     int32
	scale    int32
	frac     int // fractional digits of time types
	els      []string
	cs       charset
}

// Arrow types: what iceberg-go's table.TypeToArrowType gives for the
// Iceberg types below (no field IDs, no large types), as the PostgreSQL
// mapping uses.
var (
	arrowTimestamp   arrow.DataType = &arrow.TimestampType{Unit: arrow.Microsecond}
	arrowTimestampTz arrow.DataType = arrow.FixedWidthTypes.Timestamp_us
)

// MapColumn is Map(c).Field(): the column as it lands in the lake.
func MapColumn(c Column) (change.Field, error) {
	m, err := Map(c)
	if err != nil {
		return change.Field{}, err
	}
	return m.Field(), nil
}

// Map decides the lake type of a column. It fails, with an
// *UnsupportedTypeError, only for a type that has no exact mapping or no
// decoder (a character set the binlog decoder cannot read, MySQL 9's
// vector, a type unknown to this version); every type of MariaDB 10.11
// and MySQL 8 has a mapping.
func Map(c Column) (*Mapping, error) {
	m := &Mapping{col: c.ID(), name: c.Name, source: c.ColumnType}
	if m.source == "" {
		m.source = c.DataType
	}
	unsupported := func(reason string) error {
		return &UnsupportedTypeError{Column: c.ID(), Type: m.source, Reason: reason}
	}
	set := func(k kind, ice iceberg.Type, at arrow.DataType) {
		m.k, m.ice, m.arrow = k, ice, at
	}
	str := func(k kind) { set(k, iceberg.PrimitiveTypes.String, arrow.BinaryTypes.String) }
	bin := func(k kind) { set(k, iceberg.PrimitiveTypes.Binary, arrow.BinaryTypes.Binary) }
	dec := func(k kind, p, s int) {
		m.prec, m.scale = int32(p), int32(s)
		set(k, iceberg.DecimalTypeOf(p, s), &arrow.Decimal128Type{Precision: int32(p), Scale: int32(s)})
	}
	switch dt := strings.ToLower(c.DataType); dt {
	case "time", "datetime", "timestamp":
		if c.OldTemporal && c.DatetimePrecision > 0 {
			return nil, unsupported("the column is stored in MariaDB 5.3's temporal format (SHOW CREATE TABLE " +
				"shows /* mariadb-5.3 */), whose fractional seconds the binlog decoder cannot read; " +
				"ALTER TABLE … FORCE rebuilds the table in the current format (mysql56_temporal_format=ON)")
		}
		m.oldTime = c.OldTemporal && dt == "time"
	}
	switch dt := strings.ToLower(c.DataType); dt {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
		m.bits = map[string]int{"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64}[dt]
		m.unsigned = c.Unsigned
		switch {
		case m.bits == 64 && c.Unsigned:
			dec(kUint64, 20, 0)
		case m.bits == 64:
			set(kInt64, iceberg.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int64)
		case m.bits == 32 && c.Unsigned:
			set(kUint32, iceberg.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int64)
		default:
			set(kInt32, iceberg.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int32)
		}
	case "decimal", "numeric", "fixed":
		p, s := c.Precision, c.Scale
		switch {
		case p < 1 || p > 65 || s < 0 || s > p:
			return nil, unsupported(fmt.Sprintf("precision %d and scale %d are outside MySQL's own limits", p, s))
		case p <= 38:
			dec(kDecimal, p, s)
		default:
			m.prec, m.scale = int32(p), int32(s)
			str(kDecimalText)
		}
	case "float":
		set(kFloat32, iceberg.PrimitiveTypes.Float32, arrow.PrimitiveTypes.Float32)
	case "double", "real", "double precision":
		set(kFloat64, iceberg.PrimitiveTypes.Float64, arrow.PrimitiveTypes.Float64)
	case "bit":
		m.bits = c.Precision
		switch {
		case m.bits < 1 || m.bits > 64:
			return nil, unsupported(fmt.Sprintf("bit width %d is outside 1..64", m.bits))
		case m.bits == 64:
			dec(kBit64, 20, 0)
		default:
			set(kBit, iceberg.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int64)
		}
	case "enum", "set":
		if len(c.Elements) == 0 {
			return nil, unsupported("no members known (call ParseColumnType)")
		}
		if dt == "set" && len(c.Elements) > 64 {
			return nil, unsupported("a set has at most 64 members")
		}
		m.els = c.Elements
		if dt == "enum" {
			str(kEnum)
		} else {
			str(kSet)
		}
	case "year":
		set(kYear, iceberg.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int32)
	case "date":
		set(kDate, iceberg.PrimitiveTypes.Date, arrow.FixedWidthTypes.Date32)
	case "datetime":
		m.frac = c.DatetimePrecision
		set(kDatetime, iceberg.PrimitiveTypes.Timestamp, arrowTimestamp)
	case "timestamp":
		m.frac = c.DatetimePrecision
		set(kTimestamp, iceberg.PrimitiveTypes.TimestampTz, arrowTimestampTz)
	case "time":
		m.frac = c.DatetimePrecision
		set(kTime, iceberg.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int64)
		if c.TimeAs == TimeAsText {
			str(kTimeText)
		}
	case "char", "varchar", "tinytext", "text", "mediumtext", "longtext":
		cs, ok := charsetOf(c.Charset)
		switch {
		case c.Charset == "":
			return nil, unsupported("its character set is not known (Column.Charset is empty)")
		case !ok:
			return nil, unsupported(fmt.Sprintf("the binlog decoder does not read character set %s "+
				"(it reads utf8mb4, utf8mb3, ascii, latin1, ucs2, utf16, utf16le, utf32 and binary; "+
				"ALTER TABLE … CONVERT TO CHARACTER SET utf8mb4 converts a table)", c.Charset))
		case cs == csBinary && dt == "char":
			// char(n) CHARACTER SET binary is binary(n).
			m.length = int(c.MaxLength)
			bin(kBinaryFixed)
		case cs == csBinary:
			bin(kBinary)
		default:
			m.cs = cs
			str(kText)
		}
	case "json":
		str(kJSON)
	case "binary":
		m.length = int(c.MaxLength)
		bin(kBinaryFixed)
	case "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
		bin(kBinary)
	case "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
		"multipolygon", "geometrycollection", "geomcollection":
		bin(kGeometry)
	case "uuid":
		str(kUUID)
	case "inet4":
		str(kInet4)
	case "inet6":
		str(kInet6)
	case "vector":
		return nil, unsupported("vector columns are not mapped yet")
	default:
		return nil, unsupported("the type is unknown to tidemark")
	}
	return m, nil
}

// Field is the column as it lands in the lake: its name, Iceberg type and
// COLUMN_TYPE as SourceType. Missing is never set (see Column.Default).
func (m *Mapping) Field() change.Field {
	return change.Field{Name: m.name, Type: m.ice, SourceType: m.source}
}

// IcebergType is the column's lake type.
func (m *Mapping) IcebergType() iceberg.Type { return m.ice }

// ArrowType is the Arrow type of IcebergType as iceberg-go converts it;
// decoded values append to a builder of it (coltype.AppendValue).
func (m *Mapping) ArrowType() arrow.DataType { return m.arrow }

// SourceType is COLUMN_TYPE, e.g. "bigint(20) unsigned".
func (m *Mapping) SourceType() string { return m.source }

// SelectExpr is the expression a snapshot SELECT must read the column with
// so that DecodeText sees what the binlog holds: the quoted name, except
// for float, whose text MySQL rounds to 6 significant digits (16777217
// stored as 16777216 prints as 16777200): CAST(… AS DOUBLE) prints the
// float's exact value, which converts back to the same float32.
func (m *Mapping) SelectExpr() string {
	q := QuoteIdent(m.name)
	if m.k == kFloat32 {
		return "CAST(" + q + " AS DOUBLE)"
	}
	return q
}

// QuoteIdent quotes a MySQL identifier with backticks.
func QuoteIdent(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

// SessionVariables are the session settings every connection that reads
// values for DecodeText must run with: TIMESTAMP text in UTC, results in
// utf8mb4, and no PAD_CHAR_TO_FULL_LENGTH (the binlog holds char(n)
// without its trailing spaces, as SELECT prints it by default). The values
// are SQL literals, in the form go-sql-driver/mysql's Config.Params take
// them (each becomes SET name=value when a connection opens). Connect in
// utf8mb4 as well (Config.Collation "utf8mb4_unicode_ci", or charset=utf8mb4
// in the DSN). The map is fresh on every call.
func SessionVariables() map[string]string {
	return map[string]string{
		"time_zone":             "'+00:00'",
		"character_set_results": "utf8mb4",
		"sql_mode":              "'NO_ENGINE_SUBSTITUTION'",
	}
}

// SyncerSettings sets the fields of a go-mysql BinlogSyncerConfig that
// DecodeBinlog relies on: dates and times as go-mysql's text (ParseTime
// false: its time.Time moves invalid dates), TIMESTAMP text in UTC, and
// JSON doubles with a trailing ".0" as MySQL prints them.
func SyncerSettings(cfg *replication.BinlogSyncerConfig) {
	cfg.ParseTime = false
	cfg.TimestampStringLocation = time.UTC
	cfg.UseFloatWithTrailingZero = true
}
