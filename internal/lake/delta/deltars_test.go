package delta_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/lake/delta"
)

// deltars returns the python named by TIDEMARK_PYTHON, which must have
// deltalake (delta-rs) installed (scripts/setup-test-env.sh). Without it
// the test is skipped, unless TIDEMARK_REQUIRE_PYICEBERG=1 (CI), where it
// fails.
func deltars(t *testing.T) string {
	t.Helper()
	py := os.Getenv("TIDEMARK_PYTHON")
	require := os.Getenv("TIDEMARK_REQUIRE_PYICEBERG") == "1"
	if py == "" {
		msg := "TIDEMARK_PYTHON is not set: set it to a python with deltalake to check that delta-rs reads our tables"
		if require {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if out, err := exec.Command(py, "-c", "import deltalake, pyarrow").CombinedOutput(); err != nil {
		msg := fmt.Sprintf("%s cannot import deltalake: run scripts/setup-test-env.sh: %v\n%s", py, err, out)
		if require {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

type deltaRead struct {
	Version  int64            `json:"version"`
	Rows     []map[string]any `json:"rows"`
	Schema   [][]string       `json:"schema"`
	Protocol struct {
		MinReaderVersion int      `json:"minReaderVersion"`
		MinWriterVersion int      `json:"minWriterVersion"`
		ReaderFeatures   []string `json:"readerFeatures"`
		WriterFeatures   []string `json:"writerFeatures"`
	} `json:"protocol"`
	Metadata struct {
		PartitionColumns []string          `json:"partitionColumns"`
		Configuration    map[string]string `json:"configuration"`
		Name             string            `json:"name"`
	} `json:"metadata"`
	History []map[string]any  `json:"history"`
	Files   int               `json:"files"`
	Stats   []map[string]any  `json:"stats"`
	CDF     []map[string]any  `json:"cdf"`
	Txns    map[string]*int64 `json:"txns"`
}

func readWithDeltaRs(t *testing.T, py, dir string, args ...string) deltaRead {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join("..", "..", "..", "scripts", "delta_read.py"), dir}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("delta_read.py %s: %v\n%s", dir, err, stderr.String())
	}
	var out deltaRead
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("delta_read.py %s: bad JSON: %v\n%s", dir, err, stdout.String())
	}
	byID := func(rows []map[string]any) {
		sort.SliceStable(rows, func(i, j int) bool { return rows[i]["id"].(float64) < rows[j]["id"].(float64) })
	}
	byID(out.Rows)
	byID(out.CDF)
	return out
}

// normalize gives v the form json.Unmarshal into any gives.
func normalize(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// delta-rs reads a table of every bronze column type, partitioned by day,
// over several commits and a checkpoint, as written: the rows, the
// protocol, the properties, the history with tidemark's properties, the
// statistics, and the change data feed.
func TestDeltaRsReads(t *testing.T) {
	py := deltars(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "orders")
	tbl := createOrders(t, dir, 3)
	// Commits 1..5: 8 rows each, commit 2 in two batches.
	commitOf := map[int]int{}
	for k := 0; k < 5; k++ {
		var recs []arrow.RecordBatch
		if k == 1 {
			recs = []arrow.RecordBatch{orders(t, 8, 11), orders(t, 11, 16)}
		} else {
			recs = []arrow.RecordBatch{orders(t, k*8, k*8+8)}
		}
		res, err := tbl.Append(ctx, recs, delta.Commit{AppID: "shop/orders", Version: int64(100 + k),
			Props: map[string]string{"tidemark.position": fmt.Sprint(100 + k), "tidemark.watermark": fmt.Sprintf("2026-01-0%dT00:00:00Z", k+1)}})
		for _, r := range recs {
			r.Release()
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := k * 8; i < k*8+8; i++ {
			commitOf[i] = int(res.Version)
		}
	}
	const n = 40
	want := make([]any, n)
	for i := range n {
		want[i] = normalize(t, expectedRow(i))
	}

	got := readWithDeltaRs(t, py, dir, "--cdf", "--app-id", "shop/orders", "--app-id", "nobody")
	if v := got.Txns["shop/orders"]; v == nil || *v != 104 || got.Txns["nobody"] != nil {
		t.Fatalf("delta-rs txn versions %v, want shop/orders at 104", got.Txns)
	}
	if got.Version != 5 {
		t.Fatalf("delta-rs version %d, want 5", got.Version)
	}
	if !reflect.DeepEqual(normalize(t, got.Rows), want) {
		t.Fatalf("delta-rs rows differ:\n got %v\nwant %v", got.Rows, want)
	}
	if p := got.Protocol; p.MinReaderVersion != 1 || p.MinWriterVersion != 4 || len(p.ReaderFeatures)+len(p.WriterFeatures) != 0 {
		t.Fatalf("delta-rs protocol %+v", p)
	}
	if !slices.Equal(got.Metadata.PartitionColumns, []string{"cdc_ts_day"}) || got.Metadata.Name != "orders" ||
		got.Metadata.Configuration["delta.enableChangeDataFeed"] != "true" || got.Metadata.Configuration["delta.appendOnly"] != "true" {
		t.Fatalf("delta-rs metadata %+v", got.Metadata)
	}
	if len(got.History) != 6 {
		t.Fatalf("delta-rs history has %d commits, want 6: %v", len(got.History), got.History)
	}
	for v, h := range got.History {
		if int(h["version"].(float64)) != v {
			t.Fatalf("history entry %d: %v", v, h)
		}
		if v == 0 {
			if h["operation"] != "CREATE TABLE" {
				t.Fatalf("history 0: %v", h)
			}
			continue
		}
		var props map[string]string
		if err := json.Unmarshal([]byte(h["userMetadata"].(string)), &props); err != nil {
			t.Fatalf("history %d userMetadata: %v (%v)", v, err, h)
		}
		if h["operation"] != "WRITE" || props["tidemark.position"] != fmt.Sprint(99+v) || h["isBlindAppend"] != true {
			t.Fatalf("history %d: %v", v, h)
		}
	}
	// Statistics as delta-rs parses them.
	var rows int
	for _, s := range got.Stats {
		rows += int(s["num_records"].(float64))
		lo, hi := int(s["min.id"].(float64)), int(s["max.id"].(float64))
		if s["max.cdc_source_lsn"].(float64) != float64(1000+hi) || s["null_count.id"].(float64) != 0 {
			t.Fatalf("delta-rs stats %v", s)
		}
		if s["min.amount"] != fmt.Sprintf("%d.25", lo) && s["min.amount"] != float64(lo)+0.25 {
			t.Fatalf("delta-rs min.amount %v (%T), want %d.25", s["min.amount"], s["min.amount"], lo)
		}
	}
	if rows != n || got.Files != len(tbl.Files()) {
		t.Fatalf("delta-rs stats count %d rows in %d files, want %d in %d", rows, got.Files, n, len(tbl.Files()))
	}
	// The change data feed of an append-only table: every row once, an
	// insert, at the version that added it.
	if len(got.CDF) != n {
		t.Fatalf("delta-rs CDF has %d rows, want %d", len(got.CDF), n)
	}
	for i, r := range got.CDF {
		if r["_change_type"] != "insert" || int(r["_commit_version"].(float64)) != commitOf[i] || int(r["id"].(float64)) != i {
			t.Fatalf("delta-rs CDF row %d: %v (commit %d)", i, r, commitOf[i])
		}
	}
	// Time travel to before the last commit.
	old := readWithDeltaRs(t, py, dir, "--version", "4")
	if len(old.Rows) != 32 {
		t.Fatalf("delta-rs at version 4: %d rows, want 32", len(old.Rows))
	}

	// The checkpoint of version 3 (commits 0..3 deleted) gives delta-rs
	// the same table.
	cp := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(cp, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	for v := 0; v <= 3; v++ {
		if err := os.Remove(filepath.Join(cp, "_delta_log", fmt.Sprintf("%020d.json", v))); err != nil {
			t.Fatal(err)
		}
	}
	fromCP := readWithDeltaRs(t, py, cp, "--app-id", "shop/orders")
	if fromCP.Version != 5 || !reflect.DeepEqual(normalize(t, fromCP.Rows), want) || *fromCP.Txns["shop/orders"] != 104 {
		t.Fatalf("delta-rs from the checkpoint and commits 4, 5: version %d, %d rows, txns %v", fromCP.Version, len(fromCP.Rows), fromCP.Txns)
	}
	// The checkpoint alone (commits 4, 5 deleted too) holds the table of
	// version 3 with the txn of commit 3.
	if err := os.Remove(filepath.Join(cp, "_delta_log", fmt.Sprintf("%020d.json", 5))); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(cp, "_delta_log", fmt.Sprintf("%020d.json", 4))); err != nil {
		t.Fatal(err)
	}
	fromCP = readWithDeltaRs(t, py, cp, "--app-id", "shop/orders")
	if v := fromCP.Txns["shop/orders"]; v == nil || *v != 102 {
		t.Fatalf("delta-rs txn from the checkpoint %v, want 102", fromCP.Txns)
	}
	if fromCP.Version != 3 || !reflect.DeepEqual(normalize(t, fromCP.Rows), want[:24]) || fromCP.Metadata.Configuration["delta.enableChangeDataFeed"] != "true" {
		t.Fatalf("delta-rs from the checkpoint: version %d, %d rows, metadata %+v", fromCP.Version, len(fromCP.Rows), fromCP.Metadata)
	}
}

// A timestamp_ntz column makes the table reader 3 / writer 7 with the
// timestampNtz feature, which delta-rs reads.
func TestDeltaRsReadsTimestampNtz(t *testing.T) {
	py := deltars(t)
	ctx := context.Background()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "at", Type: &arrow.TimestampType{Unit: arrow.Microsecond}, Nullable: true},
	}, nil)
	dir := t.TempDir()
	tbl, err := delta.Create(ctx, dir, delta.Spec{Schema: sc, ChangeDataFeed: true, AppendOnly: true, CheckpointInterval: 2})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 4, 5, 6, 7, 890123000, time.UTC)
	for k := 0; k < 3; k++ {
		b := array.NewRecordBuilder(memory.DefaultAllocator, tbl.ArrowSchema())
		b.Field(0).(*array.Int64Builder).Append(int64(k))
		b.Field(1).(*array.TimestampBuilder).Append(arrow.Timestamp(at.Add(time.Duration(k) * time.Hour).UnixMicro()))
		rec := b.NewRecordBatch()
		b.Release()
		_, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, delta.Commit{AppID: "a", Version: int64(k + 1)})
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	got := readWithDeltaRs(t, py, dir, "--cdf")
	p := got.Protocol
	if p.MinReaderVersion != 3 || p.MinWriterVersion != 7 || !slices.Contains(p.ReaderFeatures, "timestampNtz") || !slices.Contains(p.WriterFeatures, "changeDataFeed") {
		t.Fatalf("delta-rs protocol %+v", p)
	}
	if len(got.Rows) != 3 || len(got.CDF) != 3 {
		t.Fatalf("delta-rs rows %v cdf %v", got.Rows, got.CDF)
	}
	for k, r := range got.Rows {
		if want := at.Add(time.Duration(k) * time.Hour).Format("2006-01-02T15:04:05.000000"); r["at"] != want {
			t.Fatalf("row %d: at %v, want %s", k, r["at"], want)
		}
	}
}

// delta-rs reads a table whose schema grew (a string column, then a
// timestamp_ntz one, which upgrades the protocol to table features) and
// whose properties changed: older rows read the new columns as null.
func TestDeltaRsReadsAddedColumns(t *testing.T) {
	py := deltars(t)
	ctx := context.Background()
	dir := t.TempDir()
	tbl := createOrders(t, dir, 0)
	appendRows(t, tbl, 0, 4, delta.Commit{Props: map[string]string{"tidemark.position": "4"}})
	if err := tbl.SetProperties(ctx, map[string]string{"owner": "shop"}); err != nil {
		t.Fatal(err)
	}
	ntz := &arrow.TimestampType{Unit: arrow.Microsecond}
	if err := tbl.AddColumns(ctx, []arrow.Field{{Name: "note", Type: arrow.BinaryTypes.String}, {Name: "local_at", Type: ntz}}, nil); err != nil {
		t.Fatal(err)
	}
	p := tbl.Protocol()
	if p.MinReaderVersion != 3 || p.MinWriterVersion != 7 || !slices.Contains(p.WriterFeatures, "changeDataFeed") || !slices.Contains(p.WriterFeatures, "timestampNtz") {
		t.Fatalf("protocol after adding a timestamp_ntz column: %+v", p)
	}
	old := orders(t, 4, 6)
	defer old.Release()
	sb := array.NewStringBuilder(memory.DefaultAllocator)
	sb.AppendValues([]string{"n4", "n5"}, nil)
	note := sb.NewArray()
	sb.Release()
	defer note.Release()
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	tb := array.NewTimestampBuilder(memory.DefaultAllocator, ntz)
	tb.AppendValues([]arrow.Timestamp{arrow.Timestamp(at.UnixMicro()), arrow.Timestamp(at.UnixMicro())}, nil)
	local := tb.NewArray()
	tb.Release()
	defer local.Release()
	rec := array.NewRecordBatch(tbl.ArrowSchema(), append(slices.Clone(old.Columns()), note, local), 2)
	defer rec.Release()
	if _, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, delta.Commit{Props: map[string]string{"tidemark.position": "6"}}); err != nil {
		t.Fatal(err)
	}
	got := readWithDeltaRs(t, py, dir, "--cdf")
	if got.Metadata.Configuration["owner"] != "shop" || got.Protocol.MinReaderVersion != 3 {
		t.Fatalf("delta-rs metadata %+v protocol %+v", got.Metadata, got.Protocol)
	}
	if len(got.Rows) != 6 || len(got.CDF) != 6 {
		t.Fatalf("delta-rs %d rows, %d CDF rows, want 6", len(got.Rows), len(got.CDF))
	}
	for i, r := range got.Rows {
		wantNote, wantAt := any(nil), any(nil)
		if i >= 4 {
			wantNote, wantAt = fmt.Sprintf("n%d", i), at.Format("2006-01-02T15:04:05.000000")
		}
		if r["note"] != wantNote || r["local_at"] != wantAt || r["cdc_source_lsn"].(float64) != float64(1000+i) {
			t.Fatalf("delta-rs row %d: %v", i, r)
		}
	}
	ops := []string{}
	for _, h := range got.History {
		ops = append(ops, h["operation"].(string))
	}
	if !slices.Equal(ops, []string{"CREATE TABLE", "WRITE", "SET TBLPROPERTIES", "ADD COLUMNS", "WRITE"}) {
		t.Fatalf("delta-rs history operations %v", ops)
	}
}

// runPython runs a Python program with dir as sys.argv[1].
func runPython(t *testing.T, py, prog, dir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", prog, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
}

// Tables delta-rs wrote, with its checkpoint, are read by this package
// (the log, delta-rs's checkpoint schema, partition columns), and an
// append to one is read back by delta-rs.
func TestReadsDeltaRsTables(t *testing.T) {
	py := deltars(t)
	ctx := context.Background()
	dir := t.TempDir()
	plain, parted := filepath.Join(dir, "plain"), filepath.Join(dir, "parted")
	runPython(t, py, `
import sys, datetime, pyarrow as pa
from deltalake import write_deltalake, DeltaTable
root = sys.argv[1]
def rows(a, b):
    return pa.table({
        "id": pa.array(range(a, b), pa.int64()),
        "name": pa.array(["n%d" % i for i in range(a, b)], pa.string()),
        "ts": pa.array([datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(hours=i) for i in range(a, b)], pa.timestamp("us", "UTC")),
        "region": pa.array(["eu" if i % 2 else "us" for i in range(a, b)], pa.string()),
    })
for name, part in (("plain", None), ("parted", ["region"])):
    path = root + "/" + name
    for k in range(4):
        write_deltalake(path, rows(k * 10, k * 10 + 10), mode="append", partition_by=part,
                        configuration={"delta.enableChangeDataFeed": "true"} if k == 0 else None)
        if k == 2:
            DeltaTable(path).create_checkpoint()
`, dir)
	if _, err := os.Stat(filepath.Join(plain, "_delta_log", fmt.Sprintf("%020d.checkpoint.parquet", 2))); err != nil {
		t.Fatalf("delta-rs wrote no checkpoint: %v", err)
	}
	for _, p := range []string{plain, parted} {
		// Read from delta-rs's checkpoint alone, then with the commit after it.
		cp := filepath.Join(t.TempDir(), "cp")
		if err := os.CopyFS(cp, os.DirFS(p)); err != nil {
			t.Fatal(err)
		}
		for v := 0; v <= 2; v++ {
			os.Remove(filepath.Join(cp, "_delta_log", fmt.Sprintf("%020d.json", v)))
		}
		for _, d := range []string{p, cp} {
			tbl, err := delta.Open(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			if tbl.Version() != 3 || tbl.Properties()[delta.PropChangeDataFeed] != "true" {
				t.Fatalf("%s: version %d, properties %v", d, tbl.Version(), tbl.Properties())
			}
			var ids []int64
			err = tbl.Scan(ctx, func(rec arrow.RecordBatch) error {
				id, name := rec.Column(0).(*array.Int64), rec.Column(1).(*array.String)
				for i := 0; i < id.Len(); i++ {
					if name.Value(i) != fmt.Sprintf("n%d", id.Value(i)) {
						return fmt.Errorf("row %d: name %q", id.Value(i), name.Value(i))
					}
					ids = append(ids, id.Value(i))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(ids)
			if !slices.Equal(ids, seq(0, 40)) {
				t.Fatalf("%s: ids %v", d, ids)
			}
			if d == parted && !slices.Equal(tbl.PartitionColumns(), []string{"region"}) {
				t.Fatalf("partition columns %v", tbl.PartitionColumns())
			}
		}
	}
	tbl, err := delta.Open(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, tbl.ArrowSchema())
	defer b.Release()
	b.Field(0).(*array.Int64Builder).Append(40)
	b.Field(1).(*array.StringBuilder).Append("n40")
	b.Field(2).(*array.TimestampBuilder).Append(0)
	b.Field(3).(*array.StringBuilder).Append("eu")
	rec := b.NewRecordBatch()
	defer rec.Release()
	if _, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, delta.Commit{AppID: "tidemark", Version: 1}); err != nil {
		t.Fatal(err)
	}
	got := readWithDeltaRs(t, py, plain, "--app-id", "tidemark", "--cdf")
	if len(got.Rows) != 41 || got.Rows[40]["name"] != "n40" || *got.Txns["tidemark"] != 1 || len(got.CDF) != 41 {
		t.Fatalf("delta-rs after our append: %d rows, txns %v, %d CDF rows", len(got.Rows), got.Txns, len(got.CDF))
	}
	// A table partitioned by a column tidemark does not derive is read,
	// not appended to.
	pt, err := delta.Open(ctx, parted)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pt.Append(ctx, nil, delta.Commit{}); !errors.Is(err, delta.ErrUnsupported) {
		t.Fatalf("append to a table partitioned by region: %v, want ErrUnsupported", err)
	}
}

// delta-rs reads a table whose rows were deleted by (inline) deletion
// vectors, array and bitmap containers: the deleted rows are gone. The
// delete is commit 3, checkpointed: delta-rs reads its vectors from the
// checkpoint.
func TestDeltaRsReadsDeletionVectors(t *testing.T) {
	py := deltars(t)
	ctx := context.Background()
	dir := t.TempDir()
	tbl := createDV(t, dir, 3)
	appendRows(t, tbl, 0, 10, delta.Commit{})
	appendRows(t, tbl, 10, 5010, delta.Commit{})
	deleted := map[int64]bool{}
	rows := map[string][]int64{}
	for _, id := range []int64{0, 3, 9} {
		p, pos := fileOf(t, tbl, id)
		rows[p] = append(rows[p], pos)
		deleted[id] = true
	}
	// 4500 rows of one file: a bitmap container.
	for id := int64(10); id < 5010; id++ {
		if id%10 == 0 {
			continue
		}
		p, pos := fileOf(t, tbl, id)
		rows[p] = append(rows[p], pos)
		deleted[id] = true
	}
	if _, err := tbl.Delete(ctx, rows, nil, delta.Commit{Props: map[string]string{"tidemark.bronze-snapshot": "7"}}); err != nil {
		t.Fatal(err)
	}
	// to_pyarrow_table refuses deletion vectors; DataFusion reads them.
	got := readWithDeltaRs(t, py, dir, "--query")
	var ids []int64
	for _, r := range got.Rows {
		ids = append(ids, int64(r["id"].(float64)))
	}
	var want []int64
	for i := int64(0); i < 5010; i++ {
		if !deleted[i] {
			want = append(want, i)
		}
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("delta-rs reads %d rows, want %d (first %v)", len(ids), len(want), ids[:min(10, len(ids))])
	}
	if !slices.Contains(got.Protocol.ReaderFeatures, "deletionVectors") || got.History[3]["operation"] != "DELETE" {
		t.Fatalf("delta-rs protocol %+v, history %v", got.Protocol, got.History[3])
	}
	if got := scanIDs(t, tbl); !slices.Equal(got, want) {
		t.Fatalf("our scan: %d rows, want %d", len(got), len(want))
	}
}
