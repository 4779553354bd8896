package iceberg_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	iceberggo "github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// TestScanLiveKeys: ScanLiveKeys reports exactly the rows ScanLive does
// whose key is one of the keys, with the same positions and values: over
// data files written before the key was widened from int to long and
// after, nullable long and boolean columns with nulls, a column added
// later (absent from the older files), a string column (read the general
// way), and rows deleted by position.
func TestScanLiveKeys(t *testing.T) {
	for _, widen := range []bool{false, true} {
		t.Run(fmt.Sprint("widen=", widen), func(t *testing.T) { testScanLiveKeys(t, widen) })
	}
}

func testScanLiveKeys(t *testing.T, widen bool) {
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	sch := iceberggo.NewSchema(0,
		iceberggo.NestedField{ID: 1, Name: "id", Type: iceberggo.PrimitiveTypes.Int32, Required: true},
		iceberggo.NestedField{ID: 2, Name: "qty", Type: iceberggo.PrimitiveTypes.Int64},
		iceberggo.NestedField{ID: 3, Name: "flag", Type: iceberggo.PrimitiveTypes.Bool},
		iceberggo.NestedField{ID: 4, Name: "name", Type: iceberggo.PrimitiveTypes.String},
	)
	tbl, err := cat.CreateKeyedTable(ctx, []string{"silver", "shop", "public", "keys"}, iceberg.KeyedTableSpec{
		Schema: sch, Key: []string{"id"}, Buckets: 4, DeleteMode: iceberg.MergeOnRead})
	if err != nil {
		t.Fatal(err)
	}
	add := func(from, to int) {
		t.Helper()
		sc := tbl.ArrowSchema()
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		for id := from; id <= to; id++ {
			for i, f := range sc.Fields() {
				fb := b.Field(i)
				switch {
				case f.Name == "qty" && id%7 == 0, f.Name == "flag" && id%5 == 0, f.Name == "extra" && id%3 == 0:
					fb.AppendNull()
				case f.Name == "id":
					switch x := fb.(type) {
					case *array.Int32Builder:
						x.Append(int32(id))
					case *array.Int64Builder:
						x.Append(int64(id))
					}
				case f.Name == "qty":
					fb.(*array.Int64Builder).Append(int64(id * 10))
				case f.Name == "extra":
					fb.(*array.Int64Builder).Append(int64(-id))
				case f.Name == "flag":
					fb.(*array.BooleanBuilder).Append(id%2 == 0)
				case f.Name == "name":
					fb.(*array.StringBuilder).Append(fmt.Sprint("v", id))
				}
			}
		}
		rec := b.NewRecordBatch()
		defer rec.Release()
		if err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
			t.Fatal(err)
		}
	}
	add(1, 300)
	add(301, 600)
	if widen {
		if err := tbl.WidenColumn(ctx, "id", iceberggo.PrimitiveTypes.Int64); err != nil {
			t.Fatal(err)
		}
	}
	if err := tbl.AddColumns(ctx, []iceberggo.NestedField{{ID: 5, Name: "extra", Type: iceberggo.PrimitiveTypes.Int64}}); err != nil {
		t.Fatal(err)
	}
	add(601, 900)
	add(20, 20) // a duplicate of a key, in another file

	// rows reads cols with ScanLiveKeys (keys not nil) or ScanLive, as
	// "id@file:pos=values" lines, sorted.
	rows := func(cols []string, keys []int64, all bool) []string {
		t.Helper()
		var out []string
		var files []int // of each line of out
		fn := func(rec arrow.RecordBatch, file int, pos iceberg.Positions) error {
			for i := 0; i < int(rec.NumRows()); i++ {
				id := intAt(rec.Column(0), i)
				if !all && !slices.Contains(keys, id) {
					continue
				}
				line := fmt.Sprintf("%d@%%s:%d=", id, pos.At(i))
				for c := 1; c < int(rec.NumCols()); c++ {
					line += rec.Column(c).ValueStr(i) + ","
				}
				out = append(out, line)
				files = append(files, file)
			}
			return nil
		}
		var live *iceberg.LiveRows
		var err error
		if all {
			live, err = tbl.ScanLive(ctx, nil, cols, fn)
		} else {
			var l lake.LiveRows
			l, err = tbl.ScanLiveKeys(ctx, nil, cols, keys, fn)
			live, _ = l.(*iceberg.LiveRows)
		}
		if err != nil {
			t.Fatal(err)
		}
		// By path: the file indices are the scan's own (ScanLiveKeys skips
		// the files that cannot hold a key).
		for i := range out {
			out[i] = fmt.Sprintf(out[i], filepath.Base(iceberg.LiveFile(live, files[i])))
		}
		slices.Sort(out)
		return out
	}
	keys := []int64{3, 7, 10, 14, 20, 35, 299, 300, 301, 650, 700, 899, 900, 5000, -1, 7}
	check := func(what string) {
		t.Helper()
		for _, cols := range [][]string{{"id", "qty", "flag"}, {"id", "extra", "qty"}, {"id", "name"}} {
			want := rows(cols, keys, true)
			var in []string
			for _, l := range want {
				var id int64
				fmt.Sscanf(l, "%d@", &id)
				if slices.Contains(keys, id) {
					in = append(in, l)
				}
			}
			got := rows(cols, keys, false)
			if len(in) < 10 {
				t.Fatalf("%s: only %d rows of the keys: %v", what, len(in), in)
			}
			if !slices.Equal(got, in) {
				t.Errorf("%s, columns %v:\n got %v\nwant %v", what, cols, got, in)
			}
		}
	}
	check("before deletes")
	restore := iceberg.SetLiveKeysChunk(7) // row groups read in many chunks, most without a key
	check("in chunks of 7 rows")
	restore()

	// Delete the rows of 10, 300 and one of the two of 20 by position.
	// (Not with a filter on id: iceberg-go cannot read the 4-byte bounds
	// the files written before the widening carry.)
	at := map[int64][]iceberg.RowID{}
	live, err := tbl.ScanLive(ctx, nil, []string{"id"}, func(rec arrow.RecordBatch, file int, pos iceberg.Positions) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			if id := intAt(rec.Column(0), i); id == 10 || id == 20 || id == 300 {
				at[id] = append(at[id], iceberg.RowID{File: file, Pos: pos.At(i)})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(at[20]) != 2 {
		t.Fatalf("id 20 is at %v, want two rows", at[20])
	}
	del := []iceberg.RowID{at[10][0], at[20][0], at[300][0]}
	if err := tbl.MergeRows(ctx, live, del, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	check("after deletes")
	restore = iceberg.SetLiveKeysChunk(7)
	check("after deletes, in chunks of 7 rows")
	restore()
	if got := rows([]string{"id"}, []int64{10, 20, 300}, false); len(got) != 1 {
		t.Errorf("after deleting 10, 300 and one row of 20, ScanLiveKeys finds %v", got)
	}
}

// intAt is row i of an int or long array.
func intAt(a arrow.Array, i int) int64 {
	if x, ok := a.(*array.Int32); ok {
		return int64(x.Value(i))
	}
	return a.(*array.Int64).Value(i)
}

// TestMatchKeys: the probe finds every value that is a key, whatever the
// order of the values (sorted, sorted runs, random, repeated) and however
// many keys there are (a few keys among sorted values are looked up, many
// walked along).
func TestMatchKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var keys []int64
		n := rng.IntN(300)
		if round%2 == 0 {
			n = rng.IntN(12) // a few keys: looked up among the values
		}
		for range n {
			keys = append(keys, rng.Int64N(2000)-1000)
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		vals := make([]int64, rng.IntN(2000))
		for i := range vals {
			vals[i] = rng.Int64N(2400) - 1200
		}
		switch round % 3 {
		case 0:
			slices.Sort(vals)
		case 1:
			slices.Sort(vals[:len(vals)/2])
		}
		var want []int32
		for i, v := range vals {
			if _, ok := slices.BinarySearch(keys, v); ok {
				want = append(want, int32(i))
			}
		}
		if got := iceberg.MatchKeys(keys, vals); !slices.Equal(got, want) {
			t.Fatalf("round %d: matched %v, want %v", round, got, want)
		}
	}
}

// TestScanLiveKeysPrunes: ScanLiveKeys skips the data files and row groups
// whose key bounds hold none of the keys, and only those: keys at the
// first and last row of a file and of a row group are found, over files
// written before the key was widened from int to long (4-byte bounds) and
// after.
func TestScanLiveKeysPrunes(t *testing.T) {
	for _, widen := range []bool{false, true} {
		t.Run(fmt.Sprint("widen=", widen), func(t *testing.T) { testScanLiveKeysPrunes(t, widen) })
	}
}

func testScanLiveKeysPrunes(t *testing.T, widen bool) {
	ctx := context.Background()
	// Unpartitioned, 10 rows per row group: every append is one file of
	// row groups 1-10, 11-20, ... of its range.
	tbl, add := rowGroupsTable(t, "pruned", nil, func(b *array.RecordBuilder, id int) {
		b.Field(1).(*array.Int64Builder).Append(int64(id * 10))
	})
	add(1, 100)
	add(101, 200)
	if widen {
		if err := tbl.WidenColumn(ctx, "id", iceberggo.PrimitiveTypes.Int64); err != nil {
			t.Fatal(err)
		}
	}
	add(201, 300)
	add(150, 150) // a duplicate, alone in its file
	add(-5, -1)

	cols := []string{"id", "qty"}
	var all []string // every live row, as "id=qty"
	if _, err := tbl.ScanLive(ctx, nil, cols, func(rec arrow.RecordBatch, _ int, _ iceberg.Positions) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			all = append(all, fmt.Sprintf("%d=%s", intAt(rec.Column(0), i), rec.Column(1).ValueStr(i)))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		keys          []int64
		files, groups int64 // opened, decoded
	}{
		{[]int64{1}, 1, 1},
		{[]int64{100, 101}, 2, 2},     // the last row of a file, the first of the next
		{[]int64{10, 11}, 1, 2},       // the last row of a row group, the first of the next
		{[]int64{20, 21, 30}, 1, 2},   // two keys in one row group
		{[]int64{150}, 2, 2},          // and its duplicate
		{[]int64{0, 301, 1000}, 0, 0}, // between and beyond every file
		{[]int64{-5, 300}, 2, 2},
		{[]int64{-1 << 40, 1 << 40}, 0, 0}, // beyond an int: no file may hold them
	} {
		files0, groups0 := iceberg.LiveKeysScanned()
		var got []string
		if _, err := tbl.ScanLiveKeys(ctx, nil, cols, tc.keys, func(rec arrow.RecordBatch, _ int, _ iceberg.Positions) error {
			for i := 0; i < int(rec.NumRows()); i++ {
				got = append(got, fmt.Sprintf("%d=%s", intAt(rec.Column(0), i), rec.Column(1).ValueStr(i)))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		files1, groups1 := iceberg.LiveKeysScanned()
		var want []string
		for _, l := range all {
			var id int64
			fmt.Sscanf(l, "%d=", &id)
			if slices.Contains(tc.keys, id) {
				want = append(want, l)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("keys %v: got %v, want %v", tc.keys, got, want)
		}
		if f, g := files1-files0, groups1-groups0; f != tc.files || g != tc.groups {
			t.Errorf("keys %v: opened %d files and decoded %d row groups, want %d and %d", tc.keys, f, g, tc.files, tc.groups)
		}
	}
}

// TestReadLiveRows: ReadLiveRows reads the rows asked for, by their
// position, with the values ScanLive reports for them: rows spread over
// files and row groups, runs of consecutive rows, the first and last row of
// a row group, nullable columns, a string column (read the general way),
// over files written before the key was widened and after.
func TestReadLiveRows(t *testing.T) {
	ctx := context.Background()
	name := iceberggo.NestedField{ID: 3, Name: "name", Type: iceberggo.PrimitiveTypes.String}
	tbl, add := rowGroupsTable(t, "rows", []iceberggo.NestedField{name}, func(b *array.RecordBuilder, id int) {
		if id%3 == 0 {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.Int64Builder).Append(int64(id * 10))
		}
		b.Field(2).(*array.StringBuilder).Append(fmt.Sprint("n", id))
	})
	add(1, 55)
	if err := tbl.WidenColumn(ctx, "id", iceberggo.PrimitiveTypes.Int64); err != nil {
		t.Fatal(err)
	}
	add(101, 137)

	cols := []string{"qty", "id", "name"}
	all := map[iceberg.RowID]string{} // every live row's values
	live, err := tbl.ScanLive(ctx, nil, cols, func(rec arrow.RecordBatch, file int, pos iceberg.Positions) error {
		for i := 0; i < int(rec.NumRows()); i++ {
			all[iceberg.RowID{File: file, Pos: pos.At(i)}] = fmt.Sprintf("%s,%s,%s",
				rec.Column(0).ValueStr(i), rec.Column(1).ValueStr(i), rec.Column(2).ValueStr(i))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []iceberg.RowID
	for id := range all {
		// Every 7th row, row groups' edges, and runs 20-26 and 40-44.
		if p := id.Pos; p%7 == 0 || p%10 == 9 || p%10 == 0 || (p >= 20 && p <= 26) || (p >= 40 && p <= 44) {
			ids = append(ids, id)
		}
	}
	for _, c := range [][]string{{"qty", "id"}, {"qty", "id", "name"}} {
		got := map[iceberg.RowID]string{}
		err := tbl.ReadLiveRows(ctx, live, ids, c, func(rec arrow.RecordBatch, at []iceberg.RowID) error {
			for i, id := range at {
				if _, dup := got[id]; dup {
					return fmt.Errorf("row %v reported twice", id)
				}
				line := ""
				for j := range c {
					line += rec.Column(j).ValueStr(i) + ","
				}
				got[id] = line
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ids) {
			t.Errorf("columns %v: %d rows read, want %d", c, len(got), len(ids))
		}
		for _, id := range ids {
			want := all[id]
			if len(c) == 2 {
				want = want[:strings.LastIndex(want, ",")]
			}
			if got[id] != want+"," {
				t.Errorf("columns %v, row %v: got %q, want %q", c, id, got[id], want+",")
			}
		}
	}
}

// rowGroupsTable creates a merge-on-read keyed table silver.shop.public.<name>
// of id int (the key), qty long and the extra columns, unpartitioned, with
// 10 rows per row group; add(from, to) appends ids from..to as one file,
// fill setting each row's columns after id.
func rowGroupsTable(t *testing.T, name string, extra []iceberggo.NestedField, fill func(b *array.RecordBuilder, id int)) (*iceberg.Table, func(from, to int)) {
	t.Helper()
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	fields := append([]iceberggo.NestedField{
		{ID: 1, Name: "id", Type: iceberggo.PrimitiveTypes.Int32, Required: true},
		{ID: 2, Name: "qty", Type: iceberggo.PrimitiveTypes.Int64},
	}, extra...)
	tbl, err := cat.CreateKeyedTable(ctx, []string{"silver", "shop", "public", name}, iceberg.KeyedTableSpec{
		Schema: iceberggo.NewSchema(0, fields...), Key: []string{"id"}, DeleteMode: iceberg.MergeOnRead,
		Properties: map[string]string{"write.parquet.row-group-limit": "10"}})
	if err != nil {
		t.Fatal(err)
	}
	return tbl, func(from, to int) {
		t.Helper()
		b := array.NewRecordBuilder(memory.DefaultAllocator, tbl.ArrowSchema())
		defer b.Release()
		for id := from; id <= to; id++ {
			switch x := b.Field(0).(type) {
			case *array.Int32Builder:
				x.Append(int32(id))
			case *array.Int64Builder:
				x.Append(int64(id))
			}
			fill(b, id)
		}
		rec := b.NewRecordBatch()
		defer rec.Release()
		if err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
			t.Fatal(err)
		}
	}
}
