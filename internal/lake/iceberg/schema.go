package iceberg

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// canWiden reports whether a column of type from may be changed to type to
// with every reader still able to read the old data files: the Iceberg
// spec's type promotions that a CDC source produces (int -> long,
// float -> double, decimal precision widening). iceberg-go also accepts
// string <-> binary, which we do not: the bytes of a binary column need not
// be UTF-8.
func canWiden(from, to iceberggo.Type) bool {
	switch f := from.(type) {
	case iceberggo.Int32Type:
		_, ok := to.(iceberggo.Int64Type)
		return ok
	case iceberggo.Float32Type:
		_, ok := to.(iceberggo.Float64Type)
		return ok
	case iceberggo.DecimalType:
		d, ok := to.(iceberggo.DecimalType)
		return ok && d.Scale() == f.Scale() && d.Precision() > f.Precision()
	}
	return false
}

// checkWriteSchema checks that records of Arrow schema sc can be appended
// to a table of schema ts: every column is known to the table (by field id,
// else by name) with the table's type or one the table's type was widened
// from, and every required table column is present.
//
// iceberg-go writes whatever the records hold: an unknown column would land
// in the data files under a field id the table does not have, and a type
// mismatch would only show when a reader fails.
func checkWriteSchema(ts *iceberggo.Schema, sc *arrow.Schema) error {
	fs, err := table.ArrowSchemaToIcebergWithOptions(sc, table.ArrowToIcebergOptions{
		NameMapping: ts.NameMapping(),
		TableSchema: ts,
	})
	if err != nil {
		return fmt.Errorf("records' schema: %w", err)
	}
	seen := make(map[int]bool, len(fs.Fields()))
	for _, f := range fs.Fields() {
		tf, ok := ts.FindFieldByID(f.ID)
		if !ok {
			return fmt.Errorf("records' column %s (field id %d) is not in the table's schema %d", f.Name, f.ID, ts.ID)
		}
		if err := checkWriteType(f.Name, f.Type, tf.Type); err != nil {
			return err
		}
		seen[f.ID] = true
	}
	for _, tf := range ts.Fields() {
		if tf.Required && !seen[tf.ID] {
			return fmt.Errorf("records lack required column %s", tf.Name)
		}
	}
	return nil
}

func checkWriteType(name string, file, tbl iceberggo.Type) error {
	if file.Equals(tbl) || canWiden(file, tbl) {
		return nil
	}
	fl, ok1 := file.(*iceberggo.ListType)
	tl, ok2 := tbl.(*iceberggo.ListType)
	if ok1 && ok2 && fl.ElementID == tl.ElementID {
		return checkWriteType(name+".element", fl.Element, tl.Element)
	}
	return fmt.Errorf("%w: records' column %s is %s, the table's is %s", ErrIncompatibleType, name, file, tbl)
}

// sameType is Type.Equals ignoring the field ids inside nested types, which
// Iceberg assigns when a column is added.
func sameType(a, b iceberggo.Type) bool {
	switch x := a.(type) {
	case *iceberggo.ListType:
		y, ok := b.(*iceberggo.ListType)
		return ok && x.ElementRequired == y.ElementRequired && sameType(x.Element, y.Element)
	case *iceberggo.MapType:
		y, ok := b.(*iceberggo.MapType)
		return ok && x.ValueRequired == y.ValueRequired &&
			sameType(x.KeyType, y.KeyType) && sameType(x.ValueType, y.ValueType)
	case *iceberggo.StructType:
		y, ok := b.(*iceberggo.StructType)
		if !ok || len(x.FieldList) != len(y.FieldList) {
			return false
		}
		for i, f := range x.FieldList {
			g := y.FieldList[i]
			if f.Name != g.Name || f.Required != g.Required || !sameType(f.Type, g.Type) {
				return false
			}
		}
		return true
	}
	return a.Equals(b)
}
