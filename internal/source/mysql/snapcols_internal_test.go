package mysql

import (
	"database/sql"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/coltype"
)

// colTable has a two-column key (int, varchar) and columns of the kinds
// the columnar decoder appends directly (int, int unsigned, bigint,
// utf8mb4 text) or through DecodeText (date, decimal, blob).
func colTable(t *testing.T) *table {
	t.Helper()
	c := func(name, dt, ct, cs string) Column {
		col := Column{Schema: "shop", Table: "t", Name: name, DataType: dt, ColumnType: ct, Charset: cs}
		if err := col.ParseColumnType(); err != nil {
			t.Fatal(err)
		}
		return col
	}
	tb, err := (&Capture{}).tableOf(nil, change.TableID{Schema: "shop", Name: "t"}, []Column{
		c("id", "int", "int(11)", ""),
		c("k", "varchar", "varchar(10)", "utf8mb4"),
		c("u", "int", "int(10) unsigned", ""),
		c("big", "bigint", "bigint(20)", ""),
		c("note", "longtext", "longtext", "utf8mb4"),
		c("d", "date", "date", ""),
		c("amount", "decimal", "decimal(10,2)", ""),
		c("b", "blob", "blob", "binary"),
	}, []string{"id", "k"})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// TestColChunkDecodesAsRows: a chunk decoded into Arrow columns holds what
// the row decoder gives for the same text, appended as bronze appends a
// Change's values; the rows the row decoder makes dead letters (a zero
// date, text that is not UTF-8, an integer out of range, a value over
// max_value_bytes) are the chunk's bad rows, with the same error and raw
// text; each row's key is keyOf's. Cutting rows out keeps the others and
// their sequence numbers.
func TestColChunkDecodesAsRows(t *testing.T) {
	tb := colTable(t)
	const maxValue = 16
	text := func(vs ...string) []sql.RawBytes {
		out := make([]sql.RawBytes, len(vs))
		for i, v := range vs {
			if v != "\x00NULL" {
				out[i] = sql.RawBytes(v)
			}
		}
		return out
	}
	const null = "\x00NULL"
	rows := [][]sql.RawBytes{
		text("1", "a", "4294967295", "-9223372036854775808", "héllo", "2024-02-29", "12.50", "\x00\x01"),
		text("2", "b", null, null, null, null, null, null),
		text("3", "c", "1", "2", "x", "0000-00-00", "1.00", ""),              // zero date: dead letter
		text("4", "d", "1", "2", "\xff\xfe", "2024-01-01", "1.00", ""),       // not UTF-8: dead letter
		text("5", "e", "4294967296", "2", "x", "2024-01-01", "1.00", ""),     // unsigned int out of range
		text("6", "f", "1", "2", "01234567890123456", "2024-01-01", "1", ""), // 17 bytes: too large
		text("2147483647", "ü", "0", "9223372036854775807", "", "1000-01-01", "-99999999.99", "bytes"),
	}
	cc := newColChunk(tb, 2, nil)
	want := make([]array.Builder, len(tb.maps))
	for i, m := range tb.maps {
		want[i] = array.NewBuilder(memory.DefaultAllocator, m.ArrowType())
	}
	var wantBad []badRow
	var wantKeys []string
	for i, raw := range rows {
		if err := cc.add(raw, maxValue); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		r := decodeSnapRow(tb, raw, maxValue)
		if r.err != nil {
			wantBad = append(wantBad, badRow{index: i, raw: r.raw, err: r.err})
			for _, b := range want {
				b.AppendNull()
			}
			wantKeys = append(wantKeys, "")
			continue
		}
		for j, v := range r.values {
			if err := coltype.AppendValue(want[j], v); err != nil {
				t.Fatalf("row %d column %d: %v", i, j, err)
			}
		}
		wantKeys = append(wantKeys, keyOf(tb, r.values))
	}
	if len(wantBad) != 4 {
		t.Fatalf("the row decoder made %d dead letters, want 4 (the test's rows changed?)", len(wantBad))
	}
	if len(cc.bad) != len(wantBad) {
		t.Fatalf("bad rows %+v, want %+v", cc.bad, wantBad)
	}
	for i, b := range cc.bad {
		w := wantBad[i]
		if b.index != w.index || b.raw != w.raw || b.err.Error() != w.err.Error() {
			t.Errorf("bad row %d: %d %q %q, want %d %q %q", i, b.index, b.raw, b.err, w.index, w.raw, w.err)
		}
	}
	for i, k := range wantKeys {
		if got := string(cc.key(i)); k != "" && got != k {
			t.Errorf("row %d key %q, want keyOf's %q", i, got, k)
		}
	}
	cols := cc.finish(nil)
	if cc.rows != len(rows) {
		t.Fatalf("%d rows, want %d", cc.rows, len(rows))
	}
	// The good rows (a bad row's columns are NULLs after its bad value,
	// and it is cut out when written).
	drop := []int{2, 3, 4, 5}
	wantCols := make([]arrow.Array, len(want))
	for j, b := range want {
		wantCols[j] = b.NewArray()
	}
	wantKept, err := cut(wantCols, len(rows), drop)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := cut(cols, len(rows), drop)
	if err != nil {
		t.Fatal(err)
	}
	for j, a := range kept {
		if !array.Equal(a, wantKept[j]) {
			t.Errorf("column %s:\n got  %v\n want %v", tb.cols[j].Name, a, wantKept[j])
		}
		wantKept[j].Release()
	}
	if got := kept[0].(*array.Int32); got.Len() != 3 || got.Value(0) != 1 || got.Value(1) != 2 || got.Value(2) != 2147483647 {
		t.Errorf("ids after the cut: %v, want [1 2 2147483647]", got)
	}
	if got := kept[1].(*array.String); got.Value(2) != "ü" {
		t.Errorf("k of the last row after the cut: %q", got.Value(2))
	}
	for _, a := range kept {
		a.Release()
	}
	if got, want := chunkSeq(10, len(rows), drop), []int64{snapSeqBase + 11, snapSeqBase + 12, snapSeqBase + 17}; !slices.Equal(got, want) {
		t.Errorf("seq %v, want %v", got, want)
	}
	// Nothing to cut: the arrays themselves.
	one := []arrow.Array{array.NewInt32Builder(memory.DefaultAllocator).NewArray()}
	if same, _ := cut(one, 0, nil); same[0] != one[0] {
		t.Error("cut without rows to drop copied the columns")
	}
}
