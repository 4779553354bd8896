package delta

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// The schema serialization format (PROTOCOL.md, "Schema Serialization
// Format"): Spark SQL's JSON schema.

// structType is a Delta struct type (the table schema is one).
type structType struct {
	Type   string        `json:"type"` // "struct"
	Fields []structField `json:"fields"`
}

type structField struct {
	Name     string          `json:"name"`
	Type     json.RawMessage `json:"type"`
	Nullable bool            `json:"nullable"`
	Metadata map[string]any  `json:"metadata"`
}

type arrayType struct {
	Type         string          `json:"type"` // "array"
	ElementType  json.RawMessage `json:"elementType"`
	ContainsNull bool            `json:"containsNull"`
}

type mapType struct {
	Type              string          `json:"type"` // "map"
	KeyType           json.RawMessage `json:"keyType"`
	ValueType         json.RawMessage `json:"valueType"`
	ValueContainsNull bool            `json:"valueContainsNull"`
}

// invalidName are the characters Delta forbids in column names of a table
// without column mapping (Spark's " ,;{}()\n\t=").
const invalidName = " ,;{}()\n\t="

// schemaFeatures reports the table features a schema's types need.
type schemaFeatures struct {
	timestampNtz bool
}

// toDeltaSchema returns the Delta schema string of an Arrow schema.
func toDeltaSchema(sc *arrow.Schema) (string, schemaFeatures, error) {
	var feat schemaFeatures
	st, err := toDeltaStruct(sc.Fields(), &feat, "")
	if err != nil {
		return "", feat, err
	}
	b, err := json.Marshal(st)
	return string(b), feat, err
}

func toDeltaStruct(fields []arrow.Field, feat *schemaFeatures, prefix string) (structType, error) {
	st := structType{Type: "struct", Fields: []structField{}}
	seen := map[string]bool{}
	for _, f := range fields {
		name := prefix + f.Name
		if f.Name == "" || strings.ContainsAny(f.Name, invalidName) {
			return st, fmt.Errorf("column %q: Delta without column mapping does not allow the characters %q in names (not yet supported)", name, invalidName)
		}
		if seen[strings.ToLower(f.Name)] {
			return st, fmt.Errorf("column %q: Delta column names must be unique regardless of case", name)
		}
		seen[strings.ToLower(f.Name)] = true
		t, err := toDeltaType(f.Type, feat, name)
		if err != nil {
			return st, err
		}
		md := map[string]any{}
		if doc, ok := f.Metadata.GetValue("doc"); ok && doc != "" {
			md["comment"] = doc
		}
		st.Fields = append(st.Fields, structField{Name: f.Name, Type: t, Nullable: f.Nullable, Metadata: md})
	}
	return st, nil
}

func quote(s string) json.RawMessage { b, _ := json.Marshal(s); return b }

func toDeltaType(t arrow.DataType, feat *schemaFeatures, name string) (json.RawMessage, error) {
	switch t := t.(type) {
	case *arrow.Int8Type:
		return quote("byte"), nil
	case *arrow.Int16Type:
		return quote("short"), nil
	case *arrow.Int32Type:
		return quote("integer"), nil
	case *arrow.Int64Type:
		return quote("long"), nil
	case *arrow.Float32Type:
		return quote("float"), nil
	case *arrow.Float64Type:
		return quote("double"), nil
	case *arrow.BooleanType:
		return quote("boolean"), nil
	case *arrow.StringType, *arrow.LargeStringType:
		return quote("string"), nil
	case *arrow.BinaryType, *arrow.LargeBinaryType:
		return quote("binary"), nil
	case *arrow.Decimal128Type:
		if t.Precision < 1 || t.Precision > 38 || t.Scale < 0 || t.Scale > t.Precision {
			return nil, fmt.Errorf("column %q: Delta has no decimal(%d,%d) (precision 1..38, 0 <= scale <= precision)", name, t.Precision, t.Scale)
		}
		return quote(fmt.Sprintf("decimal(%d,%d)", t.Precision, t.Scale)), nil
	case *arrow.Date32Type:
		return quote("date"), nil
	case *arrow.TimestampType:
		if t.Unit != arrow.Microsecond {
			return nil, fmt.Errorf("column %q: Delta timestamps are microseconds, the column is %s", name, t)
		}
		if t.TimeZone == "" {
			feat.timestampNtz = true
			return quote("timestamp_ntz"), nil
		}
		if t.TimeZone != "UTC" && t.TimeZone != "+00:00" && t.TimeZone != "Etc/UTC" {
			return nil, fmt.Errorf("column %q: a Delta timestamp is UTC, the column's time zone is %q", name, t.TimeZone)
		}
		return quote("timestamp"), nil
	case *arrow.ListType:
		et, err := toDeltaType(t.Elem(), feat, name+".element")
		if err != nil {
			return nil, err
		}
		return json.Marshal(arrayType{Type: "array", ElementType: et, ContainsNull: t.ElemField().Nullable})
	case *arrow.MapType:
		kt, err := toDeltaType(t.KeyType(), feat, name+".key")
		if err != nil {
			return nil, err
		}
		vt, err := toDeltaType(t.ItemType(), feat, name+".value")
		if err != nil {
			return nil, err
		}
		return json.Marshal(mapType{Type: "map", KeyType: kt, ValueType: vt, ValueContainsNull: t.ItemField().Nullable})
	case *arrow.StructType:
		st, err := toDeltaStruct(t.Fields(), feat, name+".")
		if err != nil {
			return nil, err
		}
		return json.Marshal(st)
	}
	if t.ID() == arrow.TIME64 || t.ID() == arrow.TIME32 {
		return nil, fmt.Errorf("column %q: Delta has no time-of-day type: set time_as to micros or text for a Delta lake (docs/configuration.md)", name)
	}
	return nil, fmt.Errorf("column %q: no Delta type for Arrow type %s (Delta has no time, unsigned or fixed-size binary type)", name, t)
}

// fromDeltaSchema returns the Arrow schema of a Delta schema string:
// regular (not large) strings, binaries and lists, µs timestamps with time
// zone "UTC" for timestamp and none for timestamp_ntz.
func fromDeltaSchema(s string) (*arrow.Schema, schemaFeatures, error) {
	var feat schemaFeatures
	var st structType
	if err := json.Unmarshal([]byte(s), &st); err != nil {
		return nil, feat, fmt.Errorf("schema: %w", err)
	}
	fields, err := fromDeltaFields(st.Fields, &feat)
	if err != nil {
		return nil, feat, err
	}
	return arrow.NewSchema(fields, nil), feat, nil
}

func fromDeltaFields(sf []structField, feat *schemaFeatures) ([]arrow.Field, error) {
	fields := make([]arrow.Field, 0, len(sf))
	for _, f := range sf {
		t, err := fromDeltaType(f.Type, feat)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", f.Name, err)
		}
		var md arrow.Metadata
		if c, ok := f.Metadata["comment"].(string); ok && c != "" {
			md = arrow.NewMetadata([]string{"doc"}, []string{c})
		}
		fields = append(fields, arrow.Field{Name: f.Name, Type: t, Nullable: f.Nullable, Metadata: md})
	}
	return fields, nil
}

var decimalRE = regexp.MustCompile(`^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$`)

func fromDeltaType(raw json.RawMessage, feat *schemaFeatures) (arrow.DataType, error) {
	var name string
	if err := json.Unmarshal(raw, &name); err == nil {
		switch name {
		case "byte":
			return arrow.PrimitiveTypes.Int8, nil
		case "short":
			return arrow.PrimitiveTypes.Int16, nil
		case "integer":
			return arrow.PrimitiveTypes.Int32, nil
		case "long":
			return arrow.PrimitiveTypes.Int64, nil
		case "float":
			return arrow.PrimitiveTypes.Float32, nil
		case "double":
			return arrow.PrimitiveTypes.Float64, nil
		case "boolean":
			return arrow.FixedWidthTypes.Boolean, nil
		case "string":
			return arrow.BinaryTypes.String, nil
		case "binary":
			return arrow.BinaryTypes.Binary, nil
		case "date":
			return arrow.FixedWidthTypes.Date32, nil
		case "timestamp":
			return &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, nil
		case "timestamp_ntz":
			feat.timestampNtz = true
			return &arrow.TimestampType{Unit: arrow.Microsecond}, nil
		}
		if m := decimalRE.FindStringSubmatch(name); m != nil {
			p, _ := strconv.Atoi(m[1])
			s, _ := strconv.Atoi(m[2])
			return &arrow.Decimal128Type{Precision: int32(p), Scale: int32(s)}, nil
		}
		return nil, fmt.Errorf("unsupported Delta type %q", name)
	}
	var kind struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &kind); err != nil {
		return nil, fmt.Errorf("bad Delta type %s", raw)
	}
	switch kind.Type {
	case "struct":
		var st structType
		if err := json.Unmarshal(raw, &st); err != nil {
			return nil, err
		}
		fields, err := fromDeltaFields(st.Fields, feat)
		if err != nil {
			return nil, err
		}
		return arrow.StructOf(fields...), nil
	case "array":
		var at arrayType
		if err := json.Unmarshal(raw, &at); err != nil {
			return nil, err
		}
		et, err := fromDeltaType(at.ElementType, feat)
		if err != nil {
			return nil, err
		}
		return arrow.ListOfField(arrow.Field{Name: "element", Type: et, Nullable: at.ContainsNull}), nil
	case "map":
		var mt mapType
		if err := json.Unmarshal(raw, &mt); err != nil {
			return nil, err
		}
		kt, err := fromDeltaType(mt.KeyType, feat)
		if err != nil {
			return nil, err
		}
		vt, err := fromDeltaType(mt.ValueType, feat)
		if err != nil {
			return nil, err
		}
		m := arrow.MapOf(kt, vt)
		m.SetItemNullable(mt.ValueContainsNull)
		return m, nil
	}
	return nil, fmt.Errorf("unsupported Delta type %s", raw)
}

// widens reports whether values of type from read as type to without loss,
// as Delta's type widening allows (PROTOCOL.md, "Type Widening"): integers
// to wider integers and to double, float to double, date to timestamp_ntz,
// decimal(p, s) to decimal(p+k1, s+k2) with k1 >= k2 >= 0.
func widens(from, to arrow.DataType) bool {
	rank := func(t arrow.DataType) int {
		switch t.ID() {
		case arrow.INT8:
			return 1
		case arrow.INT16:
			return 2
		case arrow.INT32:
			return 3
		case arrow.INT64:
			return 4
		}
		return 0
	}
	switch {
	case rank(from) > 0 && rank(to) > rank(from):
		return true
	case rank(from) > 0 && rank(from) < 4 && to.ID() == arrow.FLOAT64:
		return true
	case from.ID() == arrow.FLOAT32 && to.ID() == arrow.FLOAT64:
		return true
	case from.ID() == arrow.DATE32 && to.ID() == arrow.TIMESTAMP:
		ts := to.(*arrow.TimestampType)
		return ts.TimeZone == "" && ts.Unit == arrow.Microsecond
	case from.ID() == arrow.DECIMAL128 && to.ID() == arrow.DECIMAL128:
		f, t := from.(*arrow.Decimal128Type), to.(*arrow.Decimal128Type)
		k1, k2 := t.Precision-f.Precision, t.Scale-f.Scale
		return k2 >= 0 && k1 >= k2 && !(k1 == 0 && k2 == 0)
	}
	return false
}
