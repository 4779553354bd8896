package coltype

import "github.com/apache/iceberg-go"

// CanWiden reports whether a column of Iceberg type from can be evolved in
// place to type to (Iceberg's type promotion rules), so that a source
// column whose type changed keeps its lake column: the same type, int to
// long, float to double, decimal(p,s) to decimal(p2,s) with p2 >= p, and a
// list whose element type can widen. List element IDs are ignored (they
// are assigned by the table, not by the mapping).
func CanWiden(from, to iceberg.Type) bool {
	if from == nil || to == nil {
		return false
	}
	switch f := from.(type) {
	case iceberg.Int32Type:
		switch to.(type) {
		case iceberg.Int32Type, iceberg.Int64Type:
			return true
		}
		return false
	case iceberg.Float32Type:
		switch to.(type) {
		case iceberg.Float32Type, iceberg.Float64Type:
			return true
		}
		return false
	case iceberg.DecimalType:
		t, ok := to.(iceberg.DecimalType)
		return ok && t.Scale() == f.Scale() && t.Precision() >= f.Precision()
	case *iceberg.ListType:
		t, ok := to.(*iceberg.ListType)
		// An optional element may not become required.
		return ok && (f.ElementRequired || !t.ElementRequired) && CanWiden(f.Element, t.Element)
	}
	return from.Equals(to)
}
