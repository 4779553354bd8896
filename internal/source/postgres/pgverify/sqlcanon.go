package pgverify

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidemark/tidemark/internal/verify"
)

// The SQL twins of canon.go: expressions that compute, inside PostgreSQL,
// the canonical text of a column's value, so that chunk hashes are computed
// where the data is and only one row per chunk crosses the network.
//
// They are an accelerator, never the judge: a chunk whose hashes differ is
// drilled into, and every difference that is reported was found by
// comparing values decoded in Go (typemap) with values read from silver.
// If one of these expressions ever disagreed with canon.go for some value,
// the cost would be extra drilling, not a false alarm. A test checks them
// against canon.go for every type of the type-mapping golden table.

// sqlCanon returns a SQL expression giving the canonical text of the
// non-NULL value of expr, whose lake type is t; oid is the source type
// (0 inside lists). ok is false for a type with no SQL form (a list of
// lists), for which the source side is hashed in Go instead.
func sqlCanon(expr string, t arrow.DataType, oid uint32) (string, bool) {
	switch t.ID() {
	case arrow.INT32, arrow.INT64:
		return "(" + expr + ")::text", true
	case arrow.FLOAT32:
		return fmt.Sprintf("CASE WHEN (%[1]s) = 'NaN'::float4 THEN 'NaN' ELSE encode(float4send(%[1]s), 'hex') END", expr), true
	case arrow.FLOAT64:
		return fmt.Sprintf("CASE WHEN (%[1]s) = 'NaN'::float8 THEN 'NaN' ELSE encode(float8send(%[1]s), 'hex') END", expr), true
	case arrow.BOOL:
		return fmt.Sprintf("CASE WHEN %s THEN 't' ELSE 'f' END", expr), true
	case arrow.STRING, arrow.LARGE_STRING:
		switch oid {
		case pgtype.TextOID, pgtype.VarcharOID, pgtype.NameOID:
			return "(" + expr + ")::text", true
		}
		// The type's output function, exactly as the text protocol sends
		// it: a cast to text is not always that (char(n) loses its padding,
		// inet gains a netmask).
		return "format('%s', " + expr + ")", true
	case arrow.DECIMAL128:
		return "(" + expr + ")::text", true
	case arrow.BINARY, arrow.LARGE_BINARY:
		return "encode(" + expr + ", 'hex')", true
	case arrow.DATE32:
		return fmt.Sprintf("CASE WHEN (%[1]s) = 'infinity'::date THEN '2147483647' WHEN (%[1]s) = '-infinity'::date THEN '-2147483647' "+
			"ELSE ((%[1]s) - DATE '1970-01-01')::text END", expr), true
	case arrow.TIME64:
		return fmt.Sprintf("round(date_part('epoch', %s) * 1000000)::bigint::text", expr), true
	case arrow.TIMESTAMP:
		// date_part is a double, cheaper than extract's numeric, and exact to
		// the microsecond while |t| < 2^51 µs (about 1898 to 2041): the
		// conversion errs by less than half a microsecond there. Further
		// out, extract (numeric, exact on PostgreSQL 14 and later).
		return fmt.Sprintf("CASE WHEN (%[1]s) = 'infinity' THEN '9223372036854775807' WHEN (%[1]s) = '-infinity' THEN '-9223372036854775807' "+
			"WHEN abs(date_part('epoch', %[1]s)) < 2.2e9 THEN round(date_part('epoch', %[1]s) * 1000000)::bigint::text "+
			"ELSE (extract(epoch FROM (%[1]s)) * 1000000)::bigint::text END", expr), true
	case arrow.LIST, arrow.LARGE_LIST:
		elem := verify.ListElem(t)
		if _, nested := elem.(arrow.ListLikeType); nested {
			return "", false
		}
		// Elements by subscript: unnest would expand a composite element
		// into its fields.
		e := "(" + expr + ")[o_]"
		ec, ok := sqlCanon(e, elem, 0)
		if !ok {
			return "", false
		}
		return fmt.Sprintf("'[' || coalesce((SELECT string_agg(%s, ',' ORDER BY o_) FROM generate_subscripts(%s, 1) AS u_(o_)), '') || ']'",
			sqlFieldOf(e, ec), expr), true
	}
	return "", false
}

// microsCanon is sqlCanon of a time (or time[]) column landing as
// microseconds since midnight (time_as: micros; 24:00:00 is 86400000000).
func microsCanon(expr string, t arrow.DataType) string {
	if t.ID() == arrow.LIST || t.ID() == arrow.LARGE_LIST {
		return fmt.Sprintf("'[' || coalesce((SELECT string_agg(%s, ',' ORDER BY o_) FROM unnest(%s) WITH ORDINALITY AS u_(e_, o_)), '') || ']'",
			sqlFieldOf("e_", microsCanon("e_", verify.ListElem(t))), expr)
	}
	return fmt.Sprintf("round(date_part('epoch', %s) * 1000000)::bigint::text", expr)
}

// sqlFieldOf wraps a canonical expression c of expr into a field (see
// appendField): 'N' for NULL, else 'V' <length> ':' <text>. num_nulls, not
// IS NULL: a composite value whose fields are all NULL, (,), IS NULL.
func sqlFieldOf(expr, c string) string {
	return fmt.Sprintf("CASE WHEN num_nulls(%s) = 1 THEN 'N' ELSE 'V' || octet_length(%s) || ':' || %s END", expr, c, c)
}

// sqlFields returns the SQL expression of the canonical concatenation of
// cols (a row, or a key), or false if a column has no SQL form.
func sqlFields(cols []*verify.Column) (string, bool) {
	parts := make([]string, 0, len(cols))
	for _, c := range cols {
		q := quoteIdent(c.Name)
		cn, ok := sqlCanon(q, c.Arrow, c.TypeOID)
		if c.Micros {
			cn, ok = microsCanon(q, c.Arrow), true
		}
		if !ok {
			return "", false
		}
		parts = append(parts, sqlFieldOf(q, cn))
	}
	if len(parts) == 0 {
		return "''", true
	}
	return strings.Join(parts, " || "), true
}

// sqlBucket is bucketOf in SQL: the chunk of a row, from its canonical key.
func sqlBucket(keyCanon string, n int) string {
	return fmt.Sprintf("((('x' || substr(md5(%s), 1, 8))::bit(32)::int & 2147483647) %% %d)", keyCanon, n)
}

// sqlRowHash is rowHash in SQL, over the hex MD5 h of a row.
func sqlRowHash(h string) string {
	return fmt.Sprintf("('x' || substr(%s, 1, 16))::bit(64)::bigint", h)
}
