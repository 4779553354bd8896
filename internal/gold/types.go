package gold

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// Column is one column of a gold query's result: its name, DuckDB's type
// for it, and what gold stores.
type Column struct {
	Name string
	// DuckType is the type DuckDB gives the result column (DESCRIBE).
	DuckType string
	// Cast is the DuckDB type the column is cast to before it is read
	// back (the type whose Parquet form reads as Arrow).
	Cast string
	// Arrow is the column's type in the gold table.
	Arrow arrow.DataType
}

var decimalRE = regexp.MustCompile(`^DECIMAL\((\d+),\s*(\d+)\)$`)

// storable lists the result types gold stores, for the error that names
// one it cannot.
const storable = "integers (TINYINT to BIGINT, HUGEINT and unsigned ones as BIGINT), FLOAT, DOUBLE, DECIMAL(p,s) (p <= 38), VARCHAR, BOOLEAN, DATE, TIMESTAMP, TIMESTAMPTZ"

// MapType maps a DuckDB result type (as DESCRIBE prints it) to the type
// the gold table stores. Integers narrower than 32 bits widen to int;
// HUGEINT, UBIGINT and UHUGEINT become long (a value out of its range
// fails the refresh: DuckDB's sum of integers is a HUGEINT, and a long is
// what readers expect of a sum of counts); timestamps are µs (Iceberg's
// unit: TIMESTAMP_NS loses its nanoseconds). Any other type is an error
// that names the column and says what to cast it to.
func MapType(name, duck string) (Column, error) {
	t := strings.ToUpper(strings.TrimSpace(duck))
	c := Column{Name: name, DuckType: duck}
	switch t {
	case "TINYINT", "SMALLINT", "INTEGER", "UTINYINT", "USMALLINT":
		c.Cast, c.Arrow = "INTEGER", arrow.PrimitiveTypes.Int32
	case "BIGINT", "UINTEGER", "UBIGINT", "HUGEINT", "UHUGEINT":
		c.Cast, c.Arrow = "BIGINT", arrow.PrimitiveTypes.Int64
	case "FLOAT":
		c.Cast, c.Arrow = "FLOAT", arrow.PrimitiveTypes.Float32
	case "DOUBLE":
		c.Cast, c.Arrow = "DOUBLE", arrow.PrimitiveTypes.Float64
	case "VARCHAR":
		c.Cast, c.Arrow = "VARCHAR", arrow.BinaryTypes.String
	case "BOOLEAN":
		c.Cast, c.Arrow = "BOOLEAN", arrow.FixedWidthTypes.Boolean
	case "DATE":
		c.Cast, c.Arrow = "DATE", arrow.FixedWidthTypes.Date32
	case "TIMESTAMP", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS":
		c.Cast, c.Arrow = "TIMESTAMP", &arrow.TimestampType{Unit: arrow.Microsecond}
	case "TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ":
		c.Cast, c.Arrow = "TIMESTAMPTZ", &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}
	default:
		m := decimalRE.FindStringSubmatch(t)
		if m == nil {
			return Column{}, fmt.Errorf("result column %q has DuckDB type %s, which a gold table cannot store; CAST it in the SQL to one of: %s", name, duck, storable)
		}
		p, _ := strconv.Atoi(m[1])
		s, _ := strconv.Atoi(m[2])
		if p < 1 || p > 38 || s > p {
			return Column{}, fmt.Errorf("result column %q has DuckDB type %s, which a gold table cannot store; CAST it to DECIMAL(p,s) with p <= 38", name, duck)
		}
		c.Cast, c.Arrow = fmt.Sprintf("DECIMAL(%d,%d)", p, s), &arrow.Decimal128Type{Precision: int32(p), Scale: int32(s)}
	}
	return c, nil
}
