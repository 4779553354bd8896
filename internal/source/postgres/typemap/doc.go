// Package typemap decides how a PostgreSQL column is stored in the lake and
// turns PostgreSQL's text output of a value into that lake value.
//
// tidemark reads every PostgreSQL value in text format: pgoutput sends text
// tuples, and snapshot SELECTs ask pgx for the text result format. Both paths
// run under the fixed session settings of SessionSettings, so one decoder
// serves both, and a value captured by the snapshot is bit-for-bit the value
// captured by the stream.
//
// The rules (docs/type-mapping.md has the full table):
//
//   - A type whose text has an exact lake equivalent (integers, floats,
//     booleans, constrained numerics up to 38 digits, bytea, dates, times,
//     timestamps) is stored as that Iceberg type.
//   - Every other type is stored as a string holding PostgreSQL's exact text
//     output, which is lossless by definition.
//   - Domains take the mapping of their base type; one-dimensional arrays
//     become lists of their element's mapping.
//   - Options choose between mappings where a type has more than one:
//     TimeAs lands time as Iceberg time, as its text, or as long
//     microseconds (config time_as; Spark 3.5 cannot read Iceberg time).
//   - A value that has no exact lake representation (a NaN in a decimal
//     column, a timestamp beyond int64 microseconds, a multi-dimensional
//     array, malformed text) is never approximated: Decode returns a
//     *coltype.ValueError and the caller routes the row to the dead-letter table.
//
// The lake forms of values, their Arrow appenders and the widening rules
// are source-neutral and live in internal/coltype.
//
// Mapping values are immutable and safe for concurrent use.
package typemap
