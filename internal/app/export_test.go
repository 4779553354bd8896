package app_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/testenv"
)

// exportState is a table's _watermark as a reader sees it.
type exportState struct {
	FirstWindow     time.Time `json:"first_window"`
	CompleteThrough time.Time `json:"complete_through"`
	CommitLSN       int64     `json:"commit_lsn"`
}

func readExportState(dir string) (exportState, bool) {
	var st exportState
	b, err := os.ReadFile(filepath.Join(dir, "_watermark"))
	if err != nil {
		return st, false
	}
	if json.Unmarshal(b, &st) != nil {
		return st, false
	}
	return st, true
}

// windowFileRe-free parsing: <start>_<end>.<rest>
func exportWindowOf(name string) (start, end time.Time, rest string, ok bool) {
	const layout = "20060102T150405Z"
	if len(name) < 2*len(layout)+2 {
		return start, end, "", false
	}
	s, err1 := time.Parse(layout, name[:len(layout)])
	e, err2 := time.Parse(layout, name[len(layout)+1:2*len(layout)+1])
	if err1 != nil || err2 != nil {
		return start, end, "", false
	}
	return s, e, name[2*len(layout)+1:], true
}

// TestExportWindowsUnderKills: `tidemark export --follow` beside a running
// capture, under a workload with idle gaps, both SIGKILLed at random
// moments. A reader that follows the watermark only ever sees final files
// (a claimed file never changes), and at the end every window up to the
// watermark has exactly one file or empty marker, none past it is claimed,
// and the union of the files is bronze's changes, each once.
func TestExportWindowsUnderKills(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "e2e_export")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `
		CREATE TABLE items (id bigint PRIMARY KEY, version int NOT NULL, payload text);
		CREATE TABLE notes (id bigint PRIMARY KEY, body text);
		INSERT INTO items SELECT g, 1, md5(g::text) FROM generate_series(1, 300) g;`)
	r, wh := newRunner(t, bin, srcURL)
	lk := openLake(t, wh, source)
	s := r.Start()
	lk.waitCaughtUp(s, walLSN(t, srcURL), 2*time.Minute, "items", "notes")

	out := filepath.Join(t.TempDir(), "export")
	ex, _ := testenv.NewRunner(t, bin, srcURL)
	ex.Args = []string{"export", "--warehouse", wh, "--to", out, "--window", "1s", "--follow", "--every", "200ms"}
	es := ex.Start()

	// The reader: every claimed file, hashed the first time it is seen,
	// must read the same every later time.
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		seen    = map[string][32]byte{}
		changed []string
	)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for ctx.Err() == nil {
			for _, tb := range []string{"public.items", "public.notes"} {
				dir := filepath.Join(out, tb)
				st, ok := readExportState(dir)
				if !ok {
					continue
				}
				ents, _ := os.ReadDir(dir)
				for _, ent := range ents {
					_, end, rest, ok := exportWindowOf(ent.Name())
					if !ok || strings.Contains(rest, ".late-") || end.After(st.CompleteThrough) {
						continue
					}
					b, err := os.ReadFile(filepath.Join(dir, ent.Name()))
					if err != nil {
						mu.Lock()
						changed = append(changed, fmt.Sprintf("%s/%s: claimed but unreadable: %v", tb, ent.Name(), err))
						mu.Unlock()
						continue
					}
					h := sha256.Sum256(b)
					mu.Lock()
					if old, ok := seen[tb+"/"+ent.Name()]; ok && old != h {
						changed = append(changed, tb+"/"+ent.Name()+": changed after it was claimed final")
					}
					seen[tb+"/"+ent.Name()] = h
					mu.Unlock()
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	// The workload: rounds of writes with idle gaps; meanwhile the export
	// (often) and the capture (twice) are killed and restarted.
	work := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(7, 11))
		conn := connect(t, srcURL)
		defer conn.Close(context.Background())
		next := int64(1000)
		for round := 0; round < 24; round++ {
			if round%6 == 5 {
				time.Sleep(2500 * time.Millisecond) // an idle gap: empty windows
				continue
			}
			sql := fmt.Sprintf(`INSERT INTO items SELECT g, 1, md5(g::text) FROM generate_series(%d, %d) g;
				UPDATE items SET version = version + 1 WHERE id %% 7 = %d;
				DELETE FROM items WHERE id = %d;
				INSERT INTO notes VALUES (%d, 'note %d');`,
				next, next+49, rng.IntN(7), rng.Int64N(next), next, round)
			if round == 13 {
				sql += `TRUNCATE notes;`
			}
			if _, err := conn.Exec(context.Background(), sql); err != nil {
				work <- err
				return
			}
			next += 50
			time.Sleep(time.Duration(200+rng.IntN(400)) * time.Millisecond)
		}
		work <- nil
	}()
	rng := rand.New(rand.NewPCG(3, 5))
	kills := 0
	for done := false; !done; {
		select {
		case err := <-work:
			if err != nil {
				t.Fatalf("workload: %v", err)
			}
			done = true
		case <-time.After(time.Duration(500+rng.IntN(1500)) * time.Millisecond):
			if es.Exited() {
				t.Fatalf("export exited by itself: %v", es.Err)
			}
			es.Kill(t)
			es = ex.Start()
			kills++
			if kills%5 == 2 {
				s.Kill(t)
				s = r.Start()
			}
		}
	}
	lk.waitCaughtUp(s, walLSN(t, srcURL), 2*time.Minute, "items", "notes")
	last := time.Now()
	// Heartbeats move the watermark on the idle source: the export
	// catches up past the last change without another write.
	waitForExport := func(dir string) exportState {
		deadline := time.Now().Add(time.Minute)
		for {
			st, ok := readExportState(dir)
			if ok && st.CompleteThrough.After(last.Add(time.Second)) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the export's watermark did not pass %s within a minute (state %+v)", dir, last.Format(time.RFC3339Nano), st)
			}
			if es.Exited() {
				t.Fatalf("export exited by itself: %v", es.Err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitForExport(filepath.Join(out, "public.items"))
	waitForExport(filepath.Join(out, "public.notes"))
	if code := es.Stop(t, time.Minute); code != 0 {
		t.Fatalf("export exited with code %d after SIGTERM, want 0", code)
	}
	cancel()
	<-readerDone
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark run exited with code %d after SIGTERM, want 0", code)
	}
	t.Logf("%d export kills; the reader saw %d claimed files", kills, len(seen))
	for _, c := range changed {
		t.Error(c)
	}
	if len(seen) == 0 {
		t.Fatal("the reader never saw a claimed file")
	}

	for _, tb := range []string{"items", "notes"} {
		dir := filepath.Join(out, "public."+tb)
		st, _ := readExportState(dir)
		got := checkExportDir(t, dir, st, ".jsonl")
		want := bronzeChanges(t, lk, source, tb, st.CommitLSN)
		compareChanges(t, "public."+tb, want, got)
	}

	// status --format json answers "is [t0, t1) complete in bronze?" by
	// the same rule: the export's final windows are complete there too.
	outb, err := exec.Command(bin, "status", "--warehouse", wh, "--format", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("status: %v\n%s", err, outb)
	}
	var sts []struct {
		Table           string `json:"table"`
		CompleteThrough string `json:"complete_through"`
	}
	if err := json.Unmarshal(outb, &sts); err != nil {
		t.Fatalf("status --format json: %v\n%s", err, outb)
	}
	for _, ts := range sts {
		if !strings.HasSuffix(ts.Table, ".public.items") {
			continue
		}
		ct, err := time.Parse(time.RFC3339Nano, ts.CompleteThrough)
		est, _ := readExportState(filepath.Join(out, "public.items"))
		if err != nil || ct.Before(est.CompleteThrough) {
			t.Fatalf("status says bronze of items is complete through %q, the export's windows are final through %s", ts.CompleteThrough, est.CompleteThrough)
		}
	}

	// export status answers for a window: complete, and its file.
	st, _ := readExportState(filepath.Join(out, "public.items"))
	at := st.CompleteThrough.Add(-500 * time.Millisecond)
	outb, err = exec.Command(bin, "export", "status", "--to", out, "--table", "public.items", "--at", at.Format(time.RFC3339Nano), "--format", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("export status: %v\n%s", err, outb)
	}
	var ws struct {
		Complete bool   `json:"complete"`
		File     string `json:"file"`
		Empty    bool   `json:"empty"`
	}
	if err := json.Unmarshal(outb, &ws); err != nil || !ws.Complete || (ws.File == "") == !ws.Empty {
		t.Fatalf("export status of the last final window: %s (%v)", outb, err)
	}
	outb, err = exec.Command(bin, "export", "status", "--to", out, "--table", "public.items", "--at", time.Now().Add(time.Hour).Format(time.RFC3339), "--format", "json").CombinedOutput()
	if err != nil || !bytes.Contains(outb, []byte(`"complete": false`)) {
		t.Fatalf("export status of a window in the future: %v\n%s", err, outb)
	}

	// The same lake in the other formats: parquet read by DuckDB, csv by
	// a CSV reader, each with bronze's rows of the final windows.
	for _, format := range []string{"parquet", "csv"} {
		dir := filepath.Join(t.TempDir(), format)
		if b, err := exec.Command(bin, "export", "--warehouse", wh, "--to", dir, "--window", "1s", "--format", format, "--tables", "public.items").CombinedOutput(); err != nil {
			t.Fatalf("export --format %s: %v\n%s", format, err, b)
		}
		st, ok := readExportState(filepath.Join(dir, "public.items"))
		if !ok {
			t.Fatalf("export --format %s wrote no _watermark", format)
		}
		checkExportDir(t, filepath.Join(dir, "public.items"), st, "."+format)
		want := len(bronzeChanges(t, lk, source, "items", st.CommitLSN))
		var got int
		switch format {
		case "csv":
			got = csvRows(t, filepath.Join(dir, "public.items"))
		case "parquet":
			py := os.Getenv("TIDEMARK_PYTHON")
			if py == "" {
				t.Log("TIDEMARK_PYTHON is not set: the parquet files are not read by DuckDB")
				continue
			}
			b, err := exec.Command(py, "-c", `import duckdb, sys
print(duckdb.sql("SELECT count(*), count(DISTINCT (cdc_source_lsn, cdc_seq)) FROM read_parquet('`+filepath.Join(dir, "public.items")+`/*.parquet')").fetchone())`).CombinedOutput()
			if err != nil {
				t.Fatalf("duckdb read_parquet: %v\n%s", err, b)
			}
			if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "(%d,", &got); err != nil || !strings.HasSuffix(strings.TrimSpace(string(b)), fmt.Sprintf(" %d)", got)) {
				t.Fatalf("duckdb read_parquet: %s (want (n, n): every row once)", b)
			}
		}
		if got != want {
			t.Errorf("export --format %s: %d rows in the files, bronze holds %d up to the export's commit position", format, got, want)
		}
	}
}

// checkExportDir checks that every window from the first to the
// watermark has exactly one file or empty marker, nothing past it is
// claimed, no temporary file is left, and returns the changes of the
// files (jsonl only) as "lsn/seq" -> count.
func checkExportDir(t *testing.T, dir string, st exportState, ext string) map[string]int {
	t.Helper()
	if !st.CompleteThrough.After(st.FirstWindow) {
		t.Fatalf("%s: no final window (state %+v)", dir, st)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	forms := map[time.Time][]string{}
	got := map[string]int{}
	for _, ent := range ents {
		name := ent.Name()
		if name == "_watermark" {
			continue
		}
		start, end, rest, ok := exportWindowOf(name)
		if !ok {
			t.Errorf("%s: unexpected file %s (a temporary file left behind?)", dir, name)
			continue
		}
		if end.Sub(start) != time.Second {
			t.Errorf("%s: window %s is not 1s long", dir, name)
		}
		late := strings.HasPrefix(rest, ".late-")
		if !late {
			if end.After(st.CompleteThrough) {
				t.Errorf("%s: %s is past the watermark %s", dir, name, st.CompleteThrough)
			}
			forms[start] = append(forms[start], name)
		}
		if ext != ".jsonl" || !strings.HasSuffix(name, ".jsonl") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<26)
		prev := ""
		for sc.Scan() {
			dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
			dec.UseNumber()
			var row map[string]any
			if err := dec.Decode(&row); err != nil {
				t.Fatalf("%s/%s: a line that is not JSON: %v", dir, name, err)
			}
			ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(row[bronze.ColTS]))
			if err != nil {
				t.Fatalf("%s/%s: cdc_ts %v: %v", dir, name, row[bronze.ColTS], err)
			}
			if ts.Before(start) || !ts.Before(end) {
				t.Errorf("%s/%s: a row committed at %s is outside its window", dir, name, ts.Format(time.RFC3339Nano))
			}
			key := fmt.Sprintf("%v/%v", row[bronze.ColLSN], row[bronze.ColSeq])
			if k := fmt.Sprintf("%020v/%020v", row[bronze.ColLSN], row[bronze.ColSeq]); !late && k < prev {
				t.Errorf("%s/%s: rows out of source order at %s", dir, name, key)
			} else {
				prev = k
			}
			got[key]++
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	for w := st.FirstWindow; w.Before(st.CompleteThrough); w = w.Add(time.Second) {
		if n := len(forms[w]); n != 1 {
			t.Errorf("%s: window %s has %d files or markers, want exactly 1: %v", dir, w.Format(time.RFC3339), n, forms[w])
		}
	}
	return got
}

// bronzeChanges returns bronze's rows of a table at or below commit
// position c, as "lsn/seq" -> count.
func bronzeChanges(t *testing.T, lk *lakeView, source, table string, c int64) map[string]int {
	t.Helper()
	tbl, err := lk.cat.LoadTable(context.Background(), bronze.Ident(source, change.TableID{Schema: "public", Name: table}))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	err = tbl.Scan(context.Background(), func(rec arrow.RecordBatch) error {
		var lc, sc *array.Int64
		for i, f := range rec.Schema().Fields() {
			switch f.Name {
			case bronze.ColLSN:
				lc = rec.Column(i).(*array.Int64)
			case bronze.ColSeq:
				sc = rec.Column(i).(*array.Int64)
			}
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			if lc.Value(i) <= c {
				out[fmt.Sprintf("%d/%d", lc.Value(i), sc.Value(i))]++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func compareChanges(t *testing.T, what string, want, got map[string]int) {
	t.Helper()
	var missing, extra, dup []string
	for k, n := range want {
		if got[k] == 0 {
			missing = append(missing, k)
		}
		if n > 1 {
			dup = append(dup, "bronze "+k)
		}
	}
	for k, n := range got {
		if want[k] == 0 {
			extra = append(extra, k)
		}
		if n > 1 {
			dup = append(dup, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra)+len(dup) > 0 {
		t.Errorf("%s: the export's files against bronze: %d missing %v, %d not in bronze %v, duplicates %v",
			what, len(missing), head(missing), len(extra), head(extra), head(dup))
	}
	t.Logf("%s: %d changes in bronze, %d in the export", what, len(want), len(got))
}

func head(xs []string) []string {
	if len(xs) > 5 {
		return xs[:5]
	}
	return xs
}

// csvRows counts the data rows of a directory's CSV files (each must have
// bronze's header).
func csvRows(t *testing.T, dir string) int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.csv"))
	n := 0
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if len(recs) == 0 || !strings.Contains(strings.Join(recs[0], ","), bronze.ColLSN) {
			t.Fatalf("%s: no header with %s", p, bronze.ColLSN)
		}
		n += len(recs) - 1
	}
	return n
}
