package delta

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func TestStatsBounds(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "f", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "g", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "ts", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "n", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "bad", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	long := strings.Repeat("é", 40)
	b.Field(0).(*array.StringBuilder).AppendValues([]string{long + "b", long + "a", "z" + long}, nil)
	b.Field(1).(*array.Float64Builder).AppendValues([]float64{1, math.NaN(), 2}, nil)
	b.Field(2).(*array.Float64Builder).AppendValues([]float64{-1.5, 0, 2.5}, nil)
	// -1 µs and -1001 µs: truncation towards -inf keeps a lower bound.
	b.Field(3).(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{-1001, -1, 1999}, nil)
	b.Field(4).AppendNull()
	b.Field(4).AppendNull()
	b.Field(4).AppendNull()
	b.Field(5).(*array.StringBuilder).AppendValues([]string{"ok", "\xff", "x"}, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()
	fs := newFileStats(sc)
	fs.add(rec)
	js, err := fs.json()
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		NumRecords int64          `json:"numRecords"`
		Min        map[string]any `json:"minValues"`
		Max        map[string]any `json:"maxValues"`
		Nulls      map[string]any `json:"nullCount"`
	}
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	minS, maxS := st.Min["s"].(string), st.Max["s"].(string)
	for _, v := range []string{long + "b", long + "a", "z" + long} {
		if minS > v || maxS < v {
			t.Fatalf("bounds %q..%q do not hold %q", minS, maxS, v)
		}
	}
	// "z" < "é" in UTF-8 byte order: the min is z…, the max é…b cut.
	if utf8.RuneCountInString(minS) != statsPrefix || !strings.HasPrefix("z"+long, minS) ||
		utf8.RuneCountInString(maxS) != statsPrefix+1 || !strings.HasPrefix(maxS, long[:len("é")*statsPrefix]) {
		t.Fatalf("bounds %q..%q", minS, maxS)
	}
	if _, ok := st.Min["f"]; ok {
		t.Fatalf("NaN column has a min: %s", js)
	}
	if st.Min["g"] != -1.5 || st.Max["g"] != 2.5 {
		t.Fatalf("g bounds %s", js)
	}
	if st.Min["ts"] != "1969-12-31T23:59:59.998Z" || st.Max["ts"] != "1970-01-01T00:00:00.001Z" {
		t.Fatalf("ts bounds %v %v", st.Min["ts"], st.Max["ts"])
	}
	if _, ok := st.Min["n"]; ok || st.Nulls["n"] != float64(3) {
		t.Fatalf("all-null column: %s", js)
	}
	if _, ok := st.Min["bad"]; ok {
		t.Fatalf("invalid UTF-8 column has a min: %s", js)
	}
	if st.NumRecords != 3 {
		t.Fatalf("numRecords %d", st.NumRecords)
	}
}

func TestUpperPrefix(t *testing.T) {
	for _, s := range []string{"", "abc", strings.Repeat("x", statsPrefix), strings.Repeat("x", statsPrefix+1)} {
		hi, ok := upperPrefix(s)
		if !ok || hi < s {
			t.Fatalf("upperPrefix(%q) = %q, %v", s, hi, ok)
		}
	}
	if _, ok := upperPrefix(strings.Repeat("x", statsPrefix) + string(utf8.MaxRune)); ok {
		t.Fatal("a max rune after the prefix has no bound")
	}
}
