// Package coltype holds what every source shares about column values in
// the lake: their forms, their Arrow appenders, the widening rules of
// their types, the exact decimal-text parser, and ValueError for a value
// a source cannot represent.
//
// A source's type mapper (internal/source/postgres/typemap,
// internal/source/mysql) decodes a source value into one lake form:
// int32, int64, float32, float64, bool, string, []byte, decimal128.Num,
// arrow.Date32, arrow.Time64 (microseconds), arrow.Timestamp
// (microseconds), []any for a list (nil for a NULL element), or nil for
// SQL NULL. AppendValue appends such a value to a builder of its column's
// Arrow type: the Arrow type iceberg-go's table.TypeToArrowType gives for
// the column's Iceberg type, without field IDs and without large types
// (the Arrow type of each lake form is the one its builder above holds).
//
// A column's type is still an iceberg.Type (change.Field.Type); CanWiden
// states Iceberg's promotion rules over it.
package coltype
