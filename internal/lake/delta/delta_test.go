package delta_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/delta"
)

var tsUTC = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}

// ordersSchema has a column of every type a bronze table holds, and the
// cdc_* columns.
var ordersSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "amount", Type: &arrow.Decimal128Type{Precision: 10, Scale: 2}, Nullable: true},
	{Name: "ok", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
	{Name: "ratio", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "qty", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "born", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
	{Name: "tags", Type: arrow.ListOfField(arrow.Field{Name: "element", Type: arrow.BinaryTypes.String, Nullable: true}), Nullable: true},
	{Name: "payload", Type: arrow.BinaryTypes.Binary, Nullable: true},
	{Name: "addr", Type: arrow.StructOf(
		arrow.Field{Name: "city", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "zip", Type: arrow.PrimitiveTypes.Int32, Nullable: true}), Nullable: true},
	{Name: "cdc_op", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "cdc_ts", Type: tsUTC, Nullable: true},
	{Name: "cdc_source_lsn", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
}, nil)

// base is 20:00 UTC: rows 3 hours apart fall in several days.
var base = time.Date(2026, 1, 1, 20, 0, 0, 123456000, time.UTC)

func rowTS(i int) time.Time { return base.Add(time.Duration(i) * 3 * time.Hour) }

// orders builds rows [from, to) of the orders table.
func orders(t *testing.T, from, to int) arrow.RecordBatch {
	t.Helper()
	return ordersStep(from, to, 3*time.Hour)
}

// ordersStep is orders with rows step apart in cdc_ts.
func ordersStep(from, to int, step time.Duration) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, ordersSchema)
	defer b.Release()
	for i := from; i < to; i++ {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if i%7 == 0 {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("name-%d", i))
		}
		b.Field(2).(*array.Decimal128Builder).Append(decimal128.FromI64(int64(i*100 + 25)))
		b.Field(3).(*array.BooleanBuilder).Append(i%2 == 0)
		b.Field(4).(*array.Float64Builder).Append(float64(i) / 4)
		b.Field(5).(*array.Int32Builder).Append(int32(i))
		b.Field(6).(*array.Date32Builder).Append(arrow.Date32(19000 + i))
		lb := b.Field(7).(*array.ListBuilder)
		if i%5 == 0 {
			lb.AppendNull()
		} else {
			lb.Append(true)
			lb.ValueBuilder().(*array.StringBuilder).Append("a")
			lb.ValueBuilder().(*array.StringBuilder).Append(fmt.Sprintf("b%d", i))
		}
		b.Field(8).(*array.BinaryBuilder).Append([]byte{byte(i), 0xff})
		sb := b.Field(9).(*array.StructBuilder)
		if i%6 == 0 {
			sb.AppendNull()
		} else {
			sb.Append(true)
			sb.FieldBuilder(0).(*array.StringBuilder).Append(fmt.Sprintf("c%d", i))
			sb.FieldBuilder(1).(*array.Int32Builder).Append(int32(i))
		}
		b.Field(10).(*array.StringBuilder).Append("c")
		b.Field(11).(*array.TimestampBuilder).Append(arrow.Timestamp(base.Add(time.Duration(i) * step).UnixMicro()))
		b.Field(12).(*array.Int64Builder).Append(int64(1000 + i))
	}
	return b.NewRecordBatch()
}

// expectedRow is row i as scripts/delta_read.py prints it.
func expectedRow(i int) map[string]any {
	r := map[string]any{
		"id":             i,
		"name":           fmt.Sprintf("name-%d", i),
		"amount":         fmt.Sprintf("%d.25", i),
		"ok":             i%2 == 0,
		"ratio":          float64(i) / 4,
		"qty":            i,
		"born":           time.Unix(int64(19000+i)*86400, 0).UTC().Format("2006-01-02"),
		"tags":           []any{"a", fmt.Sprintf("b%d", i)},
		"payload":        fmt.Sprintf("%02xff", byte(i)),
		"addr":           map[string]any{"city": fmt.Sprintf("c%d", i), "zip": i},
		"cdc_op":         "c",
		"cdc_ts":         rowTS(i).Format("2006-01-02T15:04:05.000000+00:00"),
		"cdc_source_lsn": 1000 + i,
		"cdc_ts_day":     rowTS(i).Format("2006-01-02"),
	}
	if i%7 == 0 {
		r["name"] = nil
	}
	if i%5 == 0 {
		r["tags"] = nil
	}
	if i%6 == 0 {
		r["addr"] = nil
	}
	return r
}

func createOrders(t *testing.T, dir string, interval int) *delta.Table {
	t.Helper()
	tbl, err := delta.Create(context.Background(), dir, delta.Spec{
		Schema:             ordersSchema,
		DayPartition:       "cdc_ts",
		ChangeDataFeed:     true,
		AppendOnly:         true,
		CheckpointInterval: interval,
		Name:               "orders",
	})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func appendRows(t *testing.T, tbl *delta.Table, from, to int, c delta.Commit) delta.Result {
	t.Helper()
	rec := orders(t, from, to)
	defer rec.Release()
	res, err := tbl.Append(context.Background(), []arrow.RecordBatch{rec}, c)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// scanIDs reads the table back and returns its ids, sorted, checking that
// each row's cdc_source_lsn is 1000+id.
func scanIDs(t *testing.T, tbl *delta.Table) []int64 {
	t.Helper()
	var ids []int64
	err := tbl.Scan(context.Background(), func(rec arrow.RecordBatch) error {
		if !rec.Schema().Equal(tbl.ArrowSchema()) {
			return fmt.Errorf("scan schema %s, want %s", rec.Schema(), tbl.ArrowSchema())
		}
		id := rec.Column(0).(*array.Int64)
		lsn := rec.Column(12).(*array.Int64)
		ts := rec.Column(11).(*array.Timestamp)
		for i := 0; i < id.Len(); i++ {
			if lsn.Value(i) != 1000+id.Value(i) {
				return fmt.Errorf("row %d: lsn %d", id.Value(i), lsn.Value(i))
			}
			if want := rowTS(int(id.Value(i))).UnixMicro(); int64(ts.Value(i)) != want {
				return fmt.Errorf("row %d: cdc_ts %d, want %d", id.Value(i), ts.Value(i), want)
			}
			ids = append(ids, id.Value(i))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

func seq(from, to int) []int64 {
	var out []int64
	for i := from; i < to; i++ {
		out = append(out, int64(i))
	}
	return out
}

func TestCreateAppendReadBack(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "orders")
	tbl := createOrders(t, dir, 0)
	if _, err := delta.Create(ctx, dir, delta.Spec{Schema: ordersSchema}); !errors.Is(err, lake.ErrTableExists) {
		t.Fatalf("second create: %v, want ErrTableExists", err)
	}
	if p := tbl.Protocol(); p.MinReaderVersion != 1 || p.MinWriterVersion != 4 {
		t.Fatalf("protocol %+v, want reader 1 writer 4 (changeDataFeed)", p)
	}
	for k := 0; k < 3; k++ {
		res := appendRows(t, tbl, k*10, k*10+10, delta.Commit{AppID: "p/orders", Version: int64(k + 1),
			Props: map[string]string{"tidemark.position": fmt.Sprint(k + 1)}})
		if !res.Committed || res.Version != int64(k+1) {
			t.Fatalf("append %d: %+v", k, res)
		}
	}
	if _, err := tbl.Append(ctx, nil, delta.Commit{Props: map[string]string{"tidemark.watermark": "w"}}); err != nil {
		t.Fatal(err)
	}
	re, err := delta.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if re.Version() != 4 {
		t.Fatalf("version %d, want 4", re.Version())
	}
	if got := scanIDs(t, re); !slices.Equal(got, seq(0, 30)) {
		t.Fatalf("ids %v", got)
	}
	if v, ok := re.TxnVersion("p/orders"); !ok || v != 3 {
		t.Fatalf("txn version %d %v, want 3", v, ok)
	}
	props := re.Properties()
	if props[delta.PropChangeDataFeed] != "true" || props[delta.PropAppendOnly] != "true" || props[delta.PropDayPartition] != "cdc_ts" {
		t.Fatalf("properties %v", props)
	}
	if got := re.PartitionColumns(); !slices.Equal(got, []string{"cdc_ts_day"}) {
		t.Fatalf("partition columns %v", got)
	}
	h, err := re.History(-1)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 5 || h[0].Operation != "CREATE TABLE" || h[2].Operation != "WRITE" || h[2].Props["tidemark.position"] != "2" || h[4].Props["tidemark.watermark"] != "w" {
		t.Fatalf("history %+v", h)
	}
	// Every file is in one partition and its stats bound its rows.
	var total int64
	for _, f := range re.Files() {
		day := *f.PartitionValues["cdc_ts_day"]
		if !strings.HasPrefix(f.Path, "cdc_ts_day="+day+"/") {
			t.Fatalf("file %s in partition %s", f.Path, day)
		}
		var st struct {
			NumRecords int64                      `json:"numRecords"`
			Min        map[string]any             `json:"minValues"`
			Max        map[string]any             `json:"maxValues"`
			Nulls      map[string]json.RawMessage `json:"nullCount"`
		}
		if err := json.Unmarshal([]byte(f.Stats), &st); err != nil {
			t.Fatal(err)
		}
		total += st.NumRecords
		lo, hi := int(st.Min["id"].(float64)), int(st.Max["id"].(float64))
		for i := lo; i <= hi; i++ {
			if got := rowTS(i).Format("2006-01-02"); got != day && i != lo && i != hi {
				t.Fatalf("file %s of day %s: id range %d..%d holds a row of %s", f.Path, day, lo, hi, got)
			}
		}
		if st.Min["cdc_ts"] != rowTS(lo).Truncate(time.Millisecond).Format("2006-01-02T15:04:05.000Z") {
			t.Fatalf("file %s: min cdc_ts %v, id %d", f.Path, st.Min["cdc_ts"], lo)
		}
		if st.Min["amount"].(float64) != float64(lo)+0.25 || st.Max["cdc_source_lsn"].(float64) != float64(1000+hi) {
			t.Fatalf("file %s: stats %s", f.Path, f.Stats)
		}
		if _, ok := st.Nulls["addr"]; !ok || string(st.Nulls["payload"]) == "" {
			t.Fatalf("file %s: nullCount %s", f.Path, f.Stats)
		}
	}
	if total != 30 {
		t.Fatalf("stats count %d rows, want 30", total)
	}
}

func TestTxnIdempotence(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tbl := createOrders(t, dir, 0)
	c := delta.Commit{AppID: "pipe/orders", Version: 5}
	if res := appendRows(t, tbl, 0, 4, c); !res.Committed || res.Version != 1 {
		t.Fatalf("first append %+v", res)
	}
	// The replay of the same position (and of an older one) writes nothing,
	// also from a table opened afresh (a restart).
	re, err := delta.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int64{5, 4} {
		if res := appendRows(t, re, 0, 4, delta.Commit{AppID: c.AppID, Version: v}); res.Committed || res.Version != 1 {
			t.Fatalf("replay at %d: %+v", v, res)
		}
	}
	if re.Version() != 1 || len(re.Files()) != len(tbl.Files()) {
		t.Fatalf("replay committed: version %d", re.Version())
	}
	if res := appendRows(t, re, 4, 8, delta.Commit{AppID: c.AppID, Version: 6}); !res.Committed || res.Version != 2 {
		t.Fatalf("next append %+v", res)
	}
	// Another application's txn is independent.
	if res := appendRows(t, re, 8, 9, delta.Commit{AppID: "other", Version: 1}); !res.Committed {
		t.Fatalf("other app %+v", res)
	}
	if got := scanIDs(t, re); !slices.Equal(got, seq(0, 9)) {
		t.Fatalf("ids %v", got)
	}
	// No data file outside the log: a replay leaves nothing behind.
	if n := countParquet(t, dir); n != len(re.Files()) {
		t.Fatalf("%d Parquet files on disk, %d in the table", n, len(re.Files()))
	}
}

func countParquet(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "_delta_log" {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".parquet") {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Two writers with stale snapshots both commit: the loser retries at the
// next version, and many concurrent writers make a gapless history.
func TestConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	createOrders(t, dir, 4)
	const writers, each = 4, 5
	tables := make([]*delta.Table, writers)
	for w := range tables {
		var err error
		if tables[w], err = delta.Open(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				id := (w*each + k) * 2
				rec := orders(t, id, id+2)
				_, err := tables[w].Append(ctx, []arrow.RecordBatch{rec}, delta.Commit{AppID: fmt.Sprintf("w%d", w), Version: int64(k + 1)})
				rec.Release()
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	re, err := delta.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if re.Version() != writers*each {
		t.Fatalf("version %d, want %d", re.Version(), writers*each)
	}
	if got := scanIDs(t, re); !slices.Equal(got, seq(0, writers*each*2)) {
		t.Fatalf("ids %v", got)
	}
	for w := range writers {
		if v, _ := re.TxnVersion(fmt.Sprintf("w%d", w)); v != each {
			t.Fatalf("writer %d: txn %d", w, v)
		}
	}
}

// A stale writer whose position another writer of the same application
// committed meanwhile does not commit twice; one whose snapshot misses a
// metadata change fails with ErrCommitConflict; neither leaves files.
func TestCommitConflicts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := createOrders(t, dir, 0)
	b, err := delta.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	appendRows(t, a, 0, 2, delta.Commit{AppID: "app", Version: 7})
	if res := appendRows(t, b, 0, 2, delta.Commit{AppID: "app", Version: 7}); res.Committed || res.Version != 1 {
		t.Fatalf("stale replay %+v, want no commit (version 1 has it)", res)
	}
	// b is now at version 1; a commits txn 8, b (stale) tries txn 9.
	appendRows(t, a, 2, 4, delta.Commit{AppID: "app", Version: 8})
	rec := orders(t, 4, 6)
	defer rec.Release()
	if _, err := b.Append(ctx, []arrow.RecordBatch{rec}, delta.Commit{AppID: "app", Version: 9}); !errors.Is(err, lake.ErrCommitConflict) {
		t.Fatalf("two writers of one app: %v, want ErrCommitConflict", err)
	}
	// A metadata change (another engine's ALTER TABLE) between a's
	// snapshot and its commit.
	c0, err := os.ReadFile(filepath.Join(dir, "_delta_log", "00000000000000000000.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta string
	for _, line := range strings.Split(string(c0), "\n") {
		if strings.HasPrefix(line, `{"metaData"`) {
			meta = strings.Replace(line, `"delta.appendOnly":"true"`, `"delta.appendOnly":"true","x":"y"`, 1)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "_delta_log", "00000000000000000003.json"), []byte(meta+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, []arrow.RecordBatch{rec}, delta.Commit{}); !errors.Is(err, lake.ErrCommitConflict) {
		t.Fatalf("append over a metadata change: %v, want ErrCommitConflict", err)
	}
	if a.Properties()["x"] != "y" {
		t.Fatalf("after the conflict the table did not reload: %v", a.Properties())
	}
	re, err := delta.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := scanIDs(t, re); !slices.Equal(got, seq(0, 4)) {
		t.Fatalf("ids %v", got)
	}
	if n := countParquet(t, dir); n != len(re.Files()) {
		t.Fatalf("%d Parquet files on disk, %d in the table: a failed commit left files", n, len(re.Files()))
	}
	// After reloading, the append goes through.
	if _, err := a.Append(ctx, []arrow.RecordBatch{rec}, delta.Commit{}); err != nil {
		t.Fatal(err)
	}
}

// Checkpoints every N commits: the table reads the same from the
// checkpoint alone (the commits before it deleted).
func TestCheckpoint(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tbl := createOrders(t, dir, 3)
	for k := 0; k < 7; k++ {
		appendRows(t, tbl, k*3, k*3+3, delta.Commit{AppID: "app", Version: int64(100 + k)})
	}
	logd := filepath.Join(dir, "_delta_log")
	for _, v := range []int{3, 6} {
		if _, err := os.Stat(filepath.Join(logd, fmt.Sprintf("%020d.checkpoint.parquet", v))); err != nil {
			t.Fatalf("checkpoint %d: %v", v, err)
		}
	}
	lc, err := os.ReadFile(filepath.Join(logd, "_last_checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	var last struct{ Version, Size, NumOfAddFiles int64 }
	if err := json.Unmarshal(lc, &last); err != nil || last.Version != 6 {
		t.Fatalf("_last_checkpoint %s: %v", lc, err)
	}
	want := tbl.Files()
	for v := 0; v <= 6; v++ {
		if err := os.Remove(filepath.Join(logd, fmt.Sprintf("%020d.json", v))); err != nil {
			t.Fatal(err)
		}
	}
	re, err := delta.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if re.Version() != 7 {
		t.Fatalf("version %d", re.Version())
	}
	if v, _ := re.TxnVersion("app"); v != 106 {
		t.Fatalf("txn %d after checkpoint", v)
	}
	got := re.Files()
	if len(got) != len(want) || int64(len(want)) < last.NumOfAddFiles {
		t.Fatalf("%d files, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Path != want[i].Path || got[i].Stats != want[i].Stats || *got[i].PartitionValues["cdc_ts_day"] != *want[i].PartitionValues["cdc_ts_day"] {
			t.Fatalf("file %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if re.Properties()[delta.PropChangeDataFeed] != "true" {
		t.Fatalf("properties %v", re.Properties())
	}
	if ids := scanIDs(t, re); !slices.Equal(ids, seq(0, 21)) {
		t.Fatalf("ids %v", ids)
	}
}

func TestSchemaTypes(t *testing.T) {
	ctx := context.Background()
	ntz := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Microsecond}, Nullable: true},
	}, nil)
	tbl, err := delta.Create(ctx, t.TempDir(), delta.Spec{Schema: ntz, ChangeDataFeed: true, AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	p := tbl.Protocol()
	if p.MinReaderVersion != 3 || p.MinWriterVersion != 7 || !slices.Equal(p.ReaderFeatures, []string{"timestampNtz"}) ||
		!slices.Equal(p.WriterFeatures, []string{"timestampNtz", "appendOnly", "changeDataFeed"}) {
		t.Fatalf("protocol %+v", p)
	}
	if !arrow.TypeEqual(tbl.ArrowSchema().Field(1).Type, ntz.Field(1).Type) {
		t.Fatalf("schema %s", tbl.ArrowSchema())
	}
	for _, bad := range []arrow.Field{
		{Name: "t", Type: arrow.FixedWidthTypes.Time64us},
		{Name: "u", Type: arrow.PrimitiveTypes.Uint32},
		{Name: "ms", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}},
		{Name: "a b", Type: arrow.PrimitiveTypes.Int64},
	} {
		if _, err := delta.Create(ctx, t.TempDir(), delta.Spec{Schema: arrow.NewSchema([]arrow.Field{bad}, nil)}); err == nil {
			t.Fatalf("column %s %s: created", bad.Name, bad.Type)
		}
	}
	// A non-nullable column refuses nulls.
	b := array.NewRecordBuilder(memory.DefaultAllocator, tbl.ArrowSchema())
	defer b.Release()
	b.Field(0).AppendNull()
	b.Field(1).AppendNull()
	rec := b.NewRecordBatch()
	defer rec.Release()
	if _, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, delta.Commit{}); err == nil || !strings.Contains(err.Error(), "not nullable") {
		t.Fatalf("null in a required column: %v", err)
	}
}

func TestAppendedRanges(t *testing.T) {
	ctx := context.Background()
	tbl := createOrders(t, t.TempDir(), 2)
	for k := 0; k < 4; k++ {
		appendRows(t, tbl, k*5, k*5+5, delta.Commit{})
	}
	var ids []int64
	err := tbl.ScanAppended(ctx, 1, 3, func(rec arrow.RecordBatch) error {
		id := rec.Column(0).(*array.Int64)
		for i := 0; i < id.Len(); i++ {
			ids = append(ids, id.Value(i))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, seq(5, 15)) {
		t.Fatalf("appended (1, 3]: ids %v", ids)
	}
	rows, maxLSN, ok, err := tbl.AppendedBounds(1, 3, "cdc_source_lsn")
	if err != nil || !ok || rows != 10 || maxLSN != 1014 {
		t.Fatalf("bounds (1, 3]: %d rows, max %d, %v, %v", rows, maxLSN, ok, err)
	}
	if rows, _, _, _ := tbl.AppendedBounds(-1, 4, "cdc_source_lsn"); rows != 20 {
		t.Fatalf("bounds of everything: %d rows", rows)
	}
	if adds, err := tbl.Appended(3, 3); err != nil || len(adds) != 0 {
		t.Fatalf("empty range: %v %v", adds, err)
	}
	if _, err := tbl.Appended(1, 9); err == nil {
		t.Fatal("range past the version: no error")
	}
}

// Properties and added columns are metaData commits that keep the
// cursor (the latest commit's userMetadata), lose no concurrent append,
// and read older files' missing columns as null.
func TestSetPropertiesAndAddColumns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tbl := createOrders(t, dir, 0)
	appendRows(t, tbl, 0, 3, delta.Commit{Props: map[string]string{"tidemark.position": "3"}})
	stale, err := delta.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	appendRows(t, tbl, 3, 6, delta.Commit{Props: map[string]string{"tidemark.position": "6"}})
	// stale lost the race for version 2: rebuilt on version 2.
	if err := stale.SetProperties(ctx, map[string]string{"owner": "shop"}); err != nil {
		t.Fatal(err)
	}
	if err := stale.SetProperties(ctx, map[string]string{"delta.enableDeletionVectors": "true"}); !errors.Is(err, delta.ErrUnsupported) {
		t.Fatalf("deletion vectors: %v", err)
	}
	if err := stale.AddColumns(ctx, []arrow.Field{{Name: "note", Type: arrow.BinaryTypes.String}}, map[string]string{"tidemark.schema": "2"}); err != nil {
		t.Fatal(err)
	}
	if err := stale.AddColumns(ctx, []arrow.Field{{Name: "note", Type: arrow.BinaryTypes.String}}, nil); err != nil {
		t.Fatalf("retry of an added column: %v", err)
	}
	if stale.Version() != 4 {
		t.Fatalf("version %d, want 4 (the retry commits nothing)", stale.Version())
	}
	if err := stale.AddColumns(ctx, []arrow.Field{{Name: "note", Type: arrow.PrimitiveTypes.Int64}}, nil); err == nil {
		t.Fatal("re-adding a column with another type: no error")
	}
	h, err := stale.History(1)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 3 || h[1].Operation != "SET TBLPROPERTIES" || h[1].Props["tidemark.position"] != "6" ||
		h[2].Operation != "ADD COLUMNS" || h[2].Props["tidemark.position"] != "6" || h[2].Props["tidemark.schema"] != "2" {
		t.Fatalf("history %+v", h)
	}
	sc := stale.ArrowSchema()
	if sc.NumFields() != ordersSchema.NumFields()+1 || sc.Field(sc.NumFields()-1).Name != "note" || !sc.Field(sc.NumFields()-1).Nullable {
		t.Fatalf("schema %s", sc)
	}
	// Append on the new schema; the old files read "note" as null.
	old := orders(t, 6, 8)
	defer old.Release()
	nb := array.NewStringBuilder(memory.DefaultAllocator)
	nb.AppendValues([]string{"n6", "n7"}, nil)
	note := nb.NewArray()
	nb.Release()
	defer note.Release()
	rec := array.NewRecordBatch(sc, append(slices.Clone(old.Columns()), note), 2)
	defer rec.Release()
	if _, err := stale.Append(ctx, []arrow.RecordBatch{rec}, delta.Commit{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Append(ctx, []arrow.RecordBatch{old}, delta.Commit{}); !errors.Is(err, lake.ErrCommitConflict) {
		t.Fatalf("append on the old schema after the metadata changed: %v", err)
	}
	re, err := delta.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if re.Properties()["owner"] != "shop" || re.Properties()[delta.PropChangeDataFeed] != "true" {
		t.Fatalf("properties %v", re.Properties())
	}
	notes := map[int64]string{}
	err = re.Scan(ctx, func(rec arrow.RecordBatch) error {
		id, n := rec.Column(0).(*array.Int64), rec.Column(rec.Schema().NumFields()-1).(*array.String)
		for i := 0; i < id.Len(); i++ {
			notes[id.Value(i)] = n.ValueStr(i)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 8 || notes[0] != array.NullValueStr || notes[5] != array.NullValueStr || notes[7] != "n7" {
		t.Fatalf("notes %v", notes)
	}
}

// Files a killed writer left (an uncommitted data file, a temporary
// commit) are removed once old enough; committed files and recent
// orphans stay.
func TestRemoveOrphans(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tbl := createOrders(t, dir, 0)
	appendRows(t, tbl, 0, 10, delta.Commit{})
	old := time.Now().Add(-2 * time.Hour)
	orphans := []string{"cdc_ts_day=2026-01-01/part-00000-dead.c000.snappy.parquet", "part-00009-dead.c000.snappy.parquet", "_delta_log/_commit_dead.json.tmp"}
	for _, o := range orphans {
		p := filepath.Join(dir, filepath.FromSlash(o))
		if err := os.WriteFile(p, []byte("torn"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	recent := filepath.Join(dir, "cdc_ts_day=2026-01-01", "part-00001-inflight.c000.snappy.parquet")
	if err := os.WriteFile(recent, []byte("being written"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Committed files are old too: only unreferenced ones go.
	for _, f := range tbl.Files() {
		os.Chtimes(filepath.Join(dir, filepath.FromSlash(f.Path)), old, old)
	}
	removed, err := tbl.RemoveOrphans(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := slices.Clone(orphans)
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Fatalf("recent file: %v", err)
	}
	if got := scanIDs(t, tbl); !slices.Equal(got, seq(0, 10)) {
		t.Fatalf("ids %v", got)
	}
}

// A directory without a log is no table; a table needing a reader
// feature this package does not read (V2 checkpoints, column mapping) is
// refused rather than read wrongly.
func TestOpenRefuses(t *testing.T) {
	ctx := context.Background()
	if _, err := delta.Open(ctx, t.TempDir()); !errors.Is(err, lake.ErrNoSuchTable) {
		t.Fatalf("empty directory: %v, want ErrNoSuchTable", err)
	}
	for name, proto := range map[string]string{
		"v2 checkpoints": `{"protocol":{"minReaderVersion":3,"minWriterVersion":7,"readerFeatures":["v2Checkpoint"],"writerFeatures":["v2Checkpoint"]}}`,
		"reader 4":       `{"protocol":{"minReaderVersion":4,"minWriterVersion":7}}`,
	} {
		dir := t.TempDir()
		createOrders(t, dir, 0)
		if err := os.WriteFile(filepath.Join(dir, "_delta_log", "00000000000000000001.json"), []byte(proto+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := delta.Open(ctx, dir); !errors.Is(err, delta.ErrUnsupported) {
			t.Fatalf("%s: %v, want ErrUnsupported", name, err)
		}
	}
	dir := t.TempDir()
	createOrders(t, dir, 0)
	c0, err := os.ReadFile(filepath.Join(dir, "_delta_log", "00000000000000000000.json"))
	if err != nil {
		t.Fatal(err)
	}
	var meta string
	for _, line := range strings.Split(string(c0), "\n") {
		if strings.HasPrefix(line, `{"metaData"`) {
			meta = strings.Replace(line, `"delta.appendOnly":"true"`, `"delta.appendOnly":"true","delta.columnMapping.mode":"name"`, 1)
		}
	}
	os.WriteFile(filepath.Join(dir, "_delta_log", "00000000000000000001.json"), []byte(`{"protocol":{"minReaderVersion":2,"minWriterVersion":5}}`+"\n"+meta+"\n"), 0o644)
	if _, err := delta.Open(ctx, dir); !errors.Is(err, delta.ErrUnsupported) {
		t.Fatalf("column mapping: %v, want ErrUnsupported", err)
	}
}

// minMaxID returns "min max" of the id column from an add's stats.
func minMaxID(t *testing.T, stats string) string {
	t.Helper()
	var st struct {
		Min map[string]any `json:"minValues"`
		Max map[string]any `json:"maxValues"`
	}
	if err := json.Unmarshal([]byte(stats), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d %d", int64(st.Min["id"].(float64)), int64(st.Max["id"].(float64)))
}
