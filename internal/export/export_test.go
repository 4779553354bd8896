package export_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/export"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// env writes bronze with the real bronze.Writer (synthetic changes at
// chosen commit times, no database) and exports it.
type env struct {
	t   *testing.T
	ctx context.Context
	cat *lake.Catalog
	w   *bronze.Writer
	out string
}

var (
	t0     = time.Unix(1_800_000_000, 0).UTC() // a whole second
	orders = change.TableID{Schema: "public", Name: "orders"}
	schema = &change.Schema{Key: []string{"id"}, Fields: []change.Field{
		{Name: "id", Type: iceberg.PrimitiveTypes.Int32, SourceType: "integer"},
		{Name: "v", Type: iceberg.PrimitiveTypes.String, SourceType: "text"},
	}}
)

func newEnv(t *testing.T) *env {
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	w, err := bronze.NewWriter(ctx, cat, "src", "slot", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if _, err := w.OpenTable(ctx, orders, schema); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, cat: cat, w: w, out: filepath.Join(t.TempDir(), "out")}
}

// write buffers one change per id at lsn, committed at `at`; with props,
// as a snapshot chunk.
func (e *env) write(lsn uint64, at time.Time, op change.Op, props map[string]string, ids ...int32) {
	e.t.Helper()
	var cs []*change.Change
	for i, id := range ids {
		cs = append(cs, &change.Change{Table: orders, Op: op, Schema: schema, Values: []any{id, "v" + strconv.Itoa(int(id))},
			Pos: change.Position{LSN: lsn, Seq: int64(i + 1)}, TxID: int64(lsn), CommitTime: at})
	}
	if props != nil {
		if err := e.w.WriteBatch(e.ctx, orders, cs, props); err != nil {
			e.t.Fatal(err)
		}
		return
	}
	for _, c := range cs {
		if err := e.w.Write(e.ctx, c); err != nil {
			e.t.Fatal(err)
		}
	}
}

// flush commits with the checkpoint at commit position lsn, watermark wm.
func (e *env) flush(lsn uint64, wm time.Time) {
	e.t.Helper()
	if err := e.w.Flush(e.ctx, pipeline.Checkpoint{Resume: strconv.FormatUint(lsn+1, 10), Pos: lsn, Watermark: wm}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) pass() []export.TableResult {
	e.t.Helper()
	ex, err := export.Open(e.cat, export.Options{Source: "src", Dir: e.out, Window: time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		e.t.Fatal(err)
	}
	defer ex.Close()
	res, err := ex.Pass(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// files lists the table directory: name -> the ids of its rows ("" for an
// empty marker).
func (e *env) files() map[string]string {
	e.t.Helper()
	dir := filepath.Join(e.out, "public.orders")
	ents, err := os.ReadDir(dir)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, ent := range ents {
		if ent.Name() == "_watermark" {
			continue
		}
		f, err := os.Open(filepath.Join(dir, ent.Name()))
		if err != nil {
			e.t.Fatal(err)
		}
		var ids []string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var row map[string]any
			if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
				e.t.Fatalf("%s: %v", ent.Name(), err)
			}
			ids = append(ids, row["cdc_op"].(string)+strconv.Itoa(int(row["id"].(float64))))
		}
		f.Close()
		out[ent.Name()] = strings.Join(ids, ",")
	}
	return out
}

func (e *env) state() export.TableState {
	e.t.Helper()
	st, err := export.ReadStatus(e.out)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(st.Tables) != 1 {
		e.t.Fatalf("want one table in the export, got %+v", st.Tables)
	}
	return st.Tables[0]
}

func name(start time.Time, ext string) string {
	const l = "20060102T150405Z"
	return start.Format(l) + "_" + start.Add(time.Second).Format(l) + ext
}

func TestWindowsLateRowsAndCrashLeftovers(t *testing.T) {
	e := newEnv(t)
	// The snapshot (running): nothing is final while it runs.
	e.write(1000, t0.Add(200*time.Millisecond), change.OpRead, map[string]string{pipeline.PropSnapshot: `{"status":"running","rows":2,"estimate":3}`}, 1, 2)
	e.flush(1000, t0.Add(5*time.Second))
	if res := e.pass(); len(res) != 1 || res[0].Waiting == "" || res[0].Windows != 0 {
		t.Fatalf("a table whose snapshot runs: want it waiting, got %+v", res)
	}
	e.write(1050, t0.Add(300*time.Millisecond), change.OpRead, map[string]string{pipeline.PropSnapshot: `{"status":"done","rows":3,"estimate":3}`}, 3)
	// Changes at t0+1.5s and t0+3.2s; the checkpoint's watermark t0+4.5s:
	// with 1s lateness, windows through t0+3s are final.
	e.write(1100, t0.Add(1500*time.Millisecond), change.OpUpdate, nil, 1)
	e.write(1200, t0.Add(3200*time.Millisecond), change.OpInsert, nil, 4)
	e.flush(1200, t0.Add(4500*time.Millisecond))
	res := e.pass()
	if res[0].Windows != 2 || res[0].Empty != 1 || res[0].Rows != 4 {
		t.Fatalf("first pass: %+v", res)
	}
	want := map[string]string{
		name(t0, ".jsonl"):                    "r1,r2,r3",
		name(t0.Add(time.Second), ".jsonl"):   "u1",
		name(t0.Add(2*time.Second), ".empty"): "",
	}
	if got := e.files(); !equal(got, want) {
		t.Fatalf("first pass wrote %v, want %v", got, want)
	}
	if st := e.state(); !st.FirstWindow.Equal(t0) || !st.CompleteThrough.Equal(t0.Add(3*time.Second)) || st.CommitLSN != 1200 {
		t.Fatalf("state after the first pass: %+v", st)
	}

	// A change committed at t0+0.4s reaches bronze only now (a commit
	// timestamp far out of commit order): it is written beside its final
	// window, never dropped, and the final file is not touched.
	before := hash(t, filepath.Join(e.out, "public.orders", name(t0, ".jsonl")))
	e.write(1300, t0.Add(400*time.Millisecond), change.OpDelete, nil, 2)
	e.flush(1300, t0.Add(4600*time.Millisecond))
	res = e.pass()
	if res[0].LateRows != 1 || res[0].Windows+res[0].Empty != 0 {
		t.Fatalf("late pass: %+v", res)
	}
	want[name(t0, ".late-1300.jsonl")] = "d2"
	if got := e.files(); !equal(got, want) {
		t.Fatalf("late pass left %v, want %v", got, want)
	}
	if hash(t, filepath.Join(e.out, "public.orders", name(t0, ".jsonl"))) != before {
		t.Fatal("a final window's file changed")
	}
	if st := e.state(); st.CommitLSN != 1300 || st.LateRows != 1 {
		t.Fatalf("state after the late pass: %+v", st)
	}
	ws, err := mustStatus(t, e.out).Window("public.orders", t0.Add(300*time.Millisecond))
	if err != nil || !ws.Complete || ws.File == "" || len(ws.Late) != 1 {
		t.Fatalf("status of window t0: %+v, %v", ws, err)
	}

	// What a pass killed mid-way leaves: a window past the watermark, a
	// late file above the recorded position, a temporary file. The next
	// pass removes them (none was claimed) and writes the windows again.
	dir := filepath.Join(e.out, "public.orders")
	for _, f := range []string{name(t0.Add(3*time.Second), ".jsonl"), name(t0, ".late-9999.jsonl"), ".tmp-x.jsonl-123"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("{partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.write(1400, t0.Add(3900*time.Millisecond), change.OpInsert, nil, 5)
	e.flush(1400, t0.Add(6*time.Second))
	res = e.pass()
	if res[0].Windows != 1 || res[0].Empty != 1 || res[0].LateRows != 0 {
		t.Fatalf("pass after a crash: %+v", res)
	}
	want[name(t0.Add(3*time.Second), ".jsonl")] = "c4,c5"
	want[name(t0.Add(4*time.Second), ".empty")] = ""
	if got := e.files(); !equal(got, want) {
		t.Fatalf("pass after a crash left %v, want %v", got, want)
	}
	// Nothing new: a pass changes nothing.
	snap := e.files()
	e.pass()
	if !equal(e.files(), snap) {
		t.Fatal("a pass with nothing new changed the export")
	}
	ws, _ = mustStatus(t, e.out).Window("public.orders", t0.Add(5*time.Second))
	if ws.Complete {
		t.Fatalf("a window past the watermark is claimed complete: %+v", ws)
	}
}

func TestOpenRefuses(t *testing.T) {
	e := newEnv(t)
	log := slog.New(slog.DiscardHandler)
	ex, err := export.Open(e.cat, export.Options{Source: "src", Dir: e.out, Window: time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	// A second export of the same directory, while the first runs.
	if _, err := export.Open(e.cat, export.Options{Source: "src", Dir: e.out, Window: time.Second}, log); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second export of one directory: %v", err)
	}
	ex.Close()
	// Other settings than the directory was written with.
	_, err = export.Open(e.cat, export.Options{Source: "src", Dir: e.out, Window: time.Minute}, log)
	var fe *fault.Error
	if err == nil || !errors.As(err, &fe) || fe.Code != fault.ErrBadConfig.Code || !strings.Contains(err.Error(), "window 1s") {
		t.Fatalf("another window on the same directory: %v", err)
	}
	for _, o := range []export.Options{
		{Source: "src", Dir: e.out, Window: 1500 * time.Millisecond},
		{Source: "src", Dir: e.out, Window: time.Second, Format: "xml"},
		{Source: "src", Window: time.Second},
	} {
		if _, err := export.Open(e.cat, o, log); err == nil {
			t.Errorf("options %+v: no error", o)
		}
	}
}

func mustStatus(t *testing.T, dir string) export.Status {
	t.Helper()
	st, err := export.ReadStatus(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func hash(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v, ok := b[k]; !ok || v != a[k] {
			return false
		}
	}
	return true
}
