package bronzetest

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// row builds a bronze row by hand: op, position, then column/value pairs.
func row(op string, lsn, seq int64, kv ...any) Row {
	r := Row{bronze.ColOp: op, bronze.ColLSN: lsn, bronze.ColSeq: seq, bronze.ColTxID: lsn, bronze.ColUnchanged: []any{}}
	for i := 0; i+1 < len(kv); i += 2 {
		r[kv[i].(string)] = kv[i+1]
	}
	return r
}

func unchanged(r Row, cols ...string) Row {
	l := make([]any, len(cols))
	for i, c := range cols {
		l[i] = c
	}
	r[bronze.ColUnchanged] = l
	return r
}

func TestSort(t *testing.T) {
	rows := []Row{row("c", 20, 2), row("c", 10, 5), row("c", 20, 1), row("r", 15, 1)}
	Sort(rows)
	var got []string
	for _, r := range rows {
		got = append(got, r.Pos())
	}
	want := []string{"10:5", "15:1", "20:1", "20:2"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Sort order = %v, want %v", got, want)
	}
}

func TestDuplicates(t *testing.T) {
	if d := Duplicates([]Row{row("c", 1, 1), row("c", 1, 2), row("c", 2, 1)}); len(d) != 0 {
		t.Fatalf("Duplicates of distinct positions = %v, want none", d)
	}
	d := Duplicates([]Row{row("c", 1, 1), row("u", 3, 2), row("c", 1, 1), row("u", 3, 2), row("u", 3, 2)})
	if len(d) != 2 {
		t.Fatalf("Duplicates = %v, want 2 entries", d)
	}
	if !strings.Contains(d[0], "1:1 appears 2 times") || !strings.Contains(d[1], "3:2 appears 3 times") {
		t.Fatalf("Duplicates = %q, want positions 1:1 (x2) and 3:2 (x3)", d)
	}
}

func TestReplay(t *testing.T) {
	key := []string{"tenant", "id"}
	rows := []Row{
		// Deliberately out of order: Replay sorts.
		unchanged(row("u", 30, 1, "tenant", int64(1), "id", int64(1), "v", int64(3), "big", nil), "big"),
		row("r", 10, 1, "tenant", int64(1), "id", int64(1), "v", int64(1), "big", "xxx"),
		row("r", 10, 2, "tenant", int64(1), "id", int64(2), "v", int64(1), "big", "yyy"),
		row("c", 20, 1, "tenant", int64(2), "id", int64(1), "v", int64(1), "big", "zzz"),
		row("u", 20, 2, "tenant", int64(1), "id", int64(2), "v", int64(2), "big", "yyy2"),
		row("d", 40, 1, "tenant", int64(1), "id", int64(2), "v", nil, "big", nil),
		row("c", 50, 1, "tenant", int64(3), "id", int64(1), "v", int64(9), "big", nil),
	}
	got := Replay(t, rows, key)
	want := map[string]Row{
		"1|1": {"tenant": int64(1), "id": int64(1), "v": int64(3), "big": "xxx"},
		"2|1": {"tenant": int64(2), "id": int64(1), "v": int64(1), "big": "zzz"},
		"3|1": {"tenant": int64(3), "id": int64(1), "v": int64(9), "big": nil},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Replay =\n%v\nwant\n%v", got, want)
	}

	// A truncate clears every key; later inserts start afresh.
	rows = append(rows, row("t", 60, 1, "tenant", nil, "id", nil), row("c", 60, 2, "tenant", int64(4), "id", int64(4), "v", int64(1), "big", "n"))
	got = Replay(t, rows, key)
	if len(got) != 1 || got["4|4"]["v"] != int64(1) {
		t.Fatalf("Replay after truncate = %v, want only key 4|4", got)
	}
}

func TestReplayUnfillableUnchanged(t *testing.T) {
	key := []string{"id"}
	// An update whose TOAST column has no earlier value, and nothing later
	// replaces it: the final state would be half-empty.
	rows := []Row{
		row("c", 1, 1, "id", int64(1), "big", "a"),
		unchanged(row("u", 5, 1, "id", int64(2), "big", nil), "big"),
		unchanged(row("u", 6, 1, "id", int64(2), "big", nil), "big"),
	}
	_, holes := Fold(rows, key)
	if len(holes) != 1 || !strings.Contains(holes[0], "key 2") || !strings.Contains(holes[0], `"big"`) || !strings.Contains(holes[0], "u 5:1") {
		t.Fatalf("holes = %q, want one naming key 2, column big and change u 5:1", holes)
	}

	// The same update followed by a snapshot read of the row is fine: the
	// read supersedes the unfilled value.
	rows = append(rows, row("r", 9, 1, "id", int64(2), "big", "b"))
	state, holes := Fold(rows, key)
	if len(holes) != 0 {
		t.Fatalf("holes = %q, want none once a later snapshot row supersedes the update", holes)
	}
	if state["2"]["big"] != "b" {
		t.Fatalf("key 2 = %v, want big=b", state["2"])
	}

	// A delete supersedes it too.
	rows = []Row{unchanged(row("u", 5, 1, "id", int64(2), "big", nil), "big"), row("d", 7, 1, "id", int64(2))}
	if _, holes := Fold(rows, key); len(holes) != 0 {
		t.Fatalf("holes = %q, want none after a delete", holes)
	}
}

func TestReplayKeyChangeCarriesUnchangedToast(t *testing.T) {
	key := []string{"id"}
	rows := []Row{
		row("c", 10, 1, "id", int64(1), "v", int64(1), "big", "payload-1"),
		// UPDATE ... SET id = 2: d of the old key, c of the new one with the
		// payload unchanged.
		row("d", 20, 1, "id", int64(1), "v", nil, "big", nil),
		unchanged(row("c", 20, 2, "id", int64(2), "v", int64(1), "big", nil), "big"),
		// An unrelated key change in another transaction whose old key has
		// no state: a hole.
		row("d", 30, 4, "id", int64(7)),
		unchanged(row("c", 30, 5, "id", int64(8), "v", int64(1), "big", nil), "big"),
	}
	state, holes := Fold(rows, key)
	if got := state["2"]["big"]; got != "payload-1" {
		t.Errorf("key 2 big = %v, want payload-1 (from the row the key change removed)", got)
	}
	if _, ok := state["1"]; ok {
		t.Errorf("old key 1 still present: %v", state["1"])
	}
	if len(holes) != 1 || !strings.Contains(holes[0], "key 8") {
		t.Errorf("holes = %q, want one for key 8", holes)
	}

	// A c with cdc_unchanged that does not follow its d directly takes
	// nothing from it.
	rows = []Row{
		row("c", 10, 1, "id", int64(1), "big", "payload-1"),
		row("d", 20, 1, "id", int64(1)),
		unchanged(row("c", 20, 3, "id", int64(2), "big", nil), "big"),
	}
	if _, holes := Fold(rows, key); len(holes) != 1 {
		t.Errorf("holes = %q, want one (the c is not at the d's seq+1)", holes)
	}
}

// TestRead writes changes through the real bronze writer and reads them back.
func TestRead(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: wh})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	w, err := bronze.NewWriter(ctx, cat, "src", "slot", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	id := change.TableID{Schema: "public", Name: "t"}
	sch := &change.Schema{Key: []string{"id"}, Fields: []change.Field{
		{Name: "id", Type: iceberg.PrimitiveTypes.Int64},
		{Name: "n", Type: iceberg.PrimitiveTypes.Int32},
		{Name: "amount", Type: iceberg.DecimalTypeOf(12, 2)},
		{Name: "at", Type: iceberg.PrimitiveTypes.TimestampTz},
		{Name: "tags", Type: &iceberg.ListType{Element: iceberg.PrimitiveTypes.String}},
		{Name: "big", Type: iceberg.PrimitiveTypes.String},
		{Name: "ok", Type: iceberg.PrimitiveTypes.Bool},
		{Name: "raw", Type: iceberg.PrimitiveTypes.Binary},
		{Name: "d", Type: iceberg.PrimitiveTypes.Date},
	}}
	if _, err := w.OpenTable(ctx, id, sch); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2024, 2, 29, 13, 14, 15, 123456000, time.UTC)
	commit := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	changes := []*change.Change{
		{Table: id, Op: change.OpInsert, Schema: sch, Pos: change.Position{LSN: 100, Seq: 1}, TxID: 7, CommitTime: commit,
			Values: []any{int64(1), int32(-5), decimal128.FromI64(-1250), arrow.Timestamp(at.UnixMicro()),
				[]any{"a", nil, "c"}, "hello", true, []byte{0, 1}, arrow.Date32(19782)}},
		{Table: id, Op: change.OpUpdate, Schema: sch, Pos: change.Position{LSN: 200, Seq: 1}, TxID: 8, CommitTime: commit,
			Values: []any{int64(1), int32(6), decimal128.FromI64(5), nil, []any{}, nil, false, nil, nil}, Unchanged: []string{"big"}},
	}
	for _, c := range changes {
		if err := w.Write(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx, pipeline.Checkpoint{Resume: strconv.FormatUint(201, 10), Pos: 200, Watermark: commit}); err != nil {
		t.Fatal(err)
	}

	rows := Read(t, wh, bronze.Ident("src", id)...)
	if len(rows) != 2 {
		t.Fatalf("read %d rows, want 2", len(rows))
	}
	Sort(rows)
	first := rows[0]
	want := Row{"id": int64(1), "n": int64(-5), "amount": "-12.50", "at": at, "tags": []any{"a", nil, "c"},
		"big": "hello", "ok": true, "raw": []byte{0, 1}, "d": time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC)}
	for k, v := range want {
		if !reflect.DeepEqual(first[k], v) {
			t.Errorf("column %s = %#v, want %#v", k, first[k], v)
		}
	}
	if first.Op() != "c" || first.LSN() != 100 || first.Seq() != 1 || first[bronze.ColTxID] != int64(7) || !first[bronze.ColTS].(time.Time).Equal(commit) {
		t.Errorf("metadata of row 1 = %v", first)
	}
	second := rows[1]
	if second["amount"] != "0.05" || !reflect.DeepEqual(second.Unchanged(), []string{"big"}) || second["at"] != nil || !reflect.DeepEqual(second["tags"], []any{}) {
		t.Errorf("row 2 = %v", second)
	}
	state := Replay(t, rows, []string{"id"})
	if got := state["1"]; got["big"] != "hello" || got["n"] != int64(6) {
		t.Errorf("replayed key 1 = %v, want big=hello (filled from the insert), n=6", got)
	}
	for col := range state["1"] {
		if IsMeta(col) {
			t.Errorf("replayed row holds metadata column %s", col)
		}
	}
}
