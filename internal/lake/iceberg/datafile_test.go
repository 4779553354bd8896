package iceberg_test

import (
	"context"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// TestLongValuesWithoutStatistics: a commit holding values longer than
// Parquet keeps statistics for is written with statistics off for those
// columns only (computing them copied each such value six times), reads
// back byte-exact in Go and in PyIceberg, keeps the bounds of its other
// columns, and is split into one file per day partition.
func TestLongValuesWithoutStatistics(t *testing.T) {
	py := pyiceberg(t)
	ctx := context.Background()
	wh := t.TempDir()
	cat := openCatalog(t, wh)
	tbl := createAllTypes(t, cat, ordersIdent)

	rows := allTypesRows()
	long := strings.Repeat("long value ✓ ", 100_000) // 1.5 MB
	rows[0].s = &long
	rows[0].bin = []byte(strings.Repeat("\x00\xff", 300_000))
	rows[1].s = ptr("short")
	rec := buildAllTypes(t, tbl.ArrowSchema(), rows)
	defer rec.Release()
	if err := tbl.Append(ctx, []arrow.RecordBatch{rec}, map[string]string{"tidemark.position": "1"}); err != nil {
		t.Fatal(err)
	}
	want := jsonRows(t, []arrow.RecordBatch{rec})
	diffRows(t, scanRows(t, ctx, tbl), want)
	diffRows(t, readWithPyIceberg(t, py, wh, "bronze.shop.public.orders").Rows, want)

	files, err := iceberg.CurrentDataFiles(ctx, tbl)
	if err != nil {
		t.Fatal(err)
	}
	// The rows' tstz fall on three days, and one is null: four files.
	if len(files) != 4 {
		t.Fatalf("%d data files, want one per day partition (4)", len(files))
	}
	field := func(name string) int {
		f, ok := tbl.Schema().FindFieldByName(name)
		if !ok {
			t.Fatalf("no column %s", name)
		}
		return f.ID
	}
	id, s, bin := field("id"), field("s"), field("bin")
	var total int64
	longFiles := 0
	for _, df := range files {
		total += df.Count()
		if _, ok := df.LowerBoundValues()[id]; !ok {
			t.Errorf("file %s: no lower bound for id (short columns keep their statistics)", df.FilePath())
		}
		if df.ValueCounts()[s] != df.Count() {
			t.Errorf("file %s: value count of s %d, want %d", df.FilePath(), df.ValueCounts()[s], df.Count())
		}
		if len(df.Partition()) != 1 {
			t.Errorf("file %s: partition %v, want one day value", df.FilePath(), df.Partition())
		}
		_, sBound := df.UpperBoundValues()[s]
		_, binBound := df.UpperBoundValues()[bin]
		_, sNulls := df.NullValueCounts()[s]
		if df.Count() == 1 && df.ValueCounts()[s] == 1 && !sNulls {
			// The file of row 1, with the long values: no statistics for s
			// and bin.
			longFiles++
			if sBound || binBound {
				t.Errorf("file %s of the long values has bounds for s or bin", df.FilePath())
			}
		} else if df.NullValueCounts()[s] == 0 && !sBound {
			t.Errorf("file %s: short s values lost their bounds", df.FilePath())
		}
	}
	if longFiles != 1 {
		t.Errorf("%d files without statistics for s, want 1 (that of the long values)", longFiles)
	}
	if total != rec.NumRows() {
		t.Errorf("files hold %d rows, want %d", total, rec.NumRows())
	}
}

// TestKeyColumnUncompressed: in a keyed table's data files the integer key
// column, which every merge scans, is stored uncompressed and without a
// dictionary, keeps its bounds, and the other columns keep the table's
// codec; the rows read back.
func TestKeyColumnUncompressed(t *testing.T) {
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	tbl := keyedTable(t, cat, []string{"silver", "shop", "public", "k"}, iceberg.MergeOnRead, 300)
	files, err := iceberg.CurrentDataFiles(ctx, tbl)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no data files")
	}
	var rows int64
	for _, df := range files {
		rows += df.Count()
		if _, ok := df.LowerBoundValues()[1]; !ok {
			t.Errorf("file %s: no lower bound for the key id", df.FilePath())
		}
		pf, err := file.OpenParquetFile(strings.TrimPrefix(df.FilePath(), "file://"), false)
		if err != nil {
			t.Fatal(err)
		}
		for rg := range pf.NumRowGroups() {
			md := pf.MetaData().RowGroup(rg)
			for c := range md.NumColumns() {
				cc, err := md.ColumnChunk(c)
				if err != nil {
					t.Fatal(err)
				}
				name := cc.PathInSchema().String()
				switch {
				case name == "id" && (cc.Compression() != compress.Codecs.Uncompressed || cc.HasDictionaryPage()):
					t.Errorf("file %s: key column id: codec %v, dictionary %v; want uncompressed, plain", df.FilePath(), cc.Compression(), cc.HasDictionaryPage())
				case name != "id" && cc.Compression() == compress.Codecs.Uncompressed:
					t.Errorf("file %s: column %s uncompressed; only the key should be", df.FilePath(), name)
				}
			}
		}
		pf.Close()
	}
	if rows != 300 {
		t.Errorf("%d rows in the data files, want 300", rows)
	}
	got := 0
	if _, err := tbl.ScanLive(ctx, nil, []string{"id", "qty"}, func(rec arrow.RecordBatch, _ int, _ iceberg.Positions) error {
		got += int(rec.NumRows())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got != 300 {
		t.Errorf("read %d rows, want 300", got)
	}
}
