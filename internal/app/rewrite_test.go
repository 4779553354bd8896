package app_test

// Table rewrites that emit no change events (issue 12): a volatile
// default, ALTER COLUMN … TYPE … USING, VACUUM FULL and CLUSTER, each under
// a concurrent workload. tidemark notices the new relfilenode and reads the
// table again online; afterwards `tidemark verify` and a PyIceberg read of
// silver equal the source.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/testenv"
)

// rewriteCase is one kind of rewrite and when tidemark is killed around it.
type rewriteCase struct {
	name string
	sql  string
	// kill: "" (tidemark keeps running), "stopped" (killed before the
	// rewrite, started after it), "reread" (killed once the re-read has
	// begun: its marker is in bronze), "marker" (exits as a kill -9 would
	// once it has seen the rewrite and committed everything before it,
	// before the marker: failpoint rewrite-before-marker).
	kill string
	// changes: the rewrite changes values (the test is void if the source
	// rows still read as before it).
	changes bool
}

func TestRewriteVolatileDefault(t *testing.T) {
	testRewrite(t, rewriteCase{name: "volatile", kill: "reread", changes: true,
		sql: `ALTER TABLE items ADD COLUMN tag text DEFAULT gen_random_uuid()::text`})
}

func TestRewriteAlterTypeUsing(t *testing.T) {
	testRewrite(t, rewriteCase{name: "using", kill: "stopped", changes: true,
		sql: `ALTER TABLE items ALTER COLUMN payload TYPE text USING upper(payload)`})
}

func TestRewriteSequenceDefaultKilledBeforeMarker(t *testing.T) {
	testRewrite(t, rewriteCase{name: "nextval", kill: "marker", changes: true,
		sql: `CREATE SEQUENCE items_seq; ALTER TABLE items ADD COLUMN tag bigint DEFAULT nextval('items_seq')`})
}

func TestRewriteVacuumFull(t *testing.T) {
	testRewrite(t, rewriteCase{name: "vacuumfull", sql: `VACUUM FULL items`})
}

func TestRewriteCluster(t *testing.T) {
	testRewrite(t, rewriteCase{name: "cluster", kill: "reread",
		sql: `CREATE INDEX items_payload ON items (payload); CLUSTER items USING items_payload`})
}

func testRewrite(t *testing.T, tc rewriteCase) {
	const rows = 3000
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "e2e_rewrite_"+tc.name)
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, fmt.Sprintf(`
		CREATE TABLE items (id bigint PRIMARY KEY, version int NOT NULL, payload text);
		INSERT INTO items SELECT g, 1, md5(g::text) FROM generate_series(1, %d) g;`, rows))
	// Small chunks, each followed by a pause: the re-read takes 30 chunks
	// of at least 50 ms, so status and a kill land inside it.
	r, wh := newRunner(t, bin, srcURL, "--publication-poll", "200ms", "--snapshot-chunk-rows", "100")
	pause := failpoint.EnvVar + "=snapshot-between-chunks=sleep(50)"
	r.Env = []string{pause}
	if tc.kill == "marker" {
		r.Env = []string{pause + ";rewrite-before-marker=exit"}
	}
	lk := openLake(t, wh, source)
	silverID := silver.Ident(source, "public", "items")

	s := r.Start()
	w := startDDLWorkload(t, srcURL, rows)
	defer w.cancel()
	lk.waitCaughtUp(s, walLSN(t, srcURL), 2*time.Minute, "items")
	waitFor(t, s, 2*time.Minute, "silver to be published", func() bool {
		_, err := lk.cat.LoadTable(context.Background(), silverID)
		return err == nil
	})
	before := readSource(t, srcURL, "items", []string{"id"})

	// requests is the re-snapshot request bronze records for items.
	request := func() string {
		return bronzeSummary(t, wh, source, "items")[pipeline.PropResnapshot]
	}
	if tc.kill == "stopped" {
		s.Kill(t)
		pg.Exec(t, srcURL, tc.sql)
		time.Sleep(200 * time.Millisecond) // writes after the rewrite while stopped
		s = r.Start()
	} else {
		pg.Exec(t, srcURL, tc.sql)
	}
	if tc.kill == "marker" {
		select {
		case <-s.Done:
		case <-time.After(time.Minute):
			t.Fatal("tidemark did not reach failpoint rewrite-before-marker within a minute of the rewrite")
		}
		if code := s.Cmd.ProcessState.ExitCode(); code != failpoint.ExitCode {
			t.Fatalf("tidemark exited with %d, want %d (failpoint rewrite-before-marker): %v", code, failpoint.ExitCode, s.Err)
		}
		if req := request(); req != "" {
			t.Fatalf("bronze records request %q before the marker was committed", req)
		}
		r.Env = []string{pause}
		s = r.Start()
	}
	waitFor(t, s, time.Minute, "bronze to record a re-read of the rewritten table", func() bool {
		return strings.Contains(request(), "-rewrite-")
	})
	id := request()
	if tc.kill == "reread" {
		s.Kill(t)
		s = r.Start()
	}
	// While the re-read runs, status says why.
	if sum := bronzeSummary(t, wh, source, "items"); sum[pipeline.PropResnapshot] == id {
		sp, _ := pipeline.ParseSnapshotState(sum[pipeline.PropSnapshot])
		out, err := exec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
		if err != nil {
			t.Fatalf("tidemark status: %v\n%s", err, out)
		}
		if sp.Status != pipeline.SnapshotDone {
			if !strings.Contains(string(out), "being read again: the table was rewritten at the source without change events") {
				t.Errorf("tidemark status during the re-read (snapshot %s) does not say why the table is read again:\n%s", sp.Status, out)
			}
		}
		t.Logf("tidemark status during the re-read:\n%s", out)
	}
	lk.waitCaughtUp(s, walLSN(t, srcURL), 2*time.Minute, "items")
	time.Sleep(time.Second)
	w.stop(t)
	lk.waitCaughtUp(s, walLSN(t, srcURL), 2*time.Minute, "items")
	if got := request(); got != id {
		t.Errorf("bronze records re-snapshot request %q, want only the one of the rewrite (%q)", got, id)
	}
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	lk.close()

	want := readSource(t, srcURL, "items", []string{"id"})
	if tc.changes {
		same := 0
		for k, row := range want {
			if b, ok := before[k]; ok && sameRow(b, row, "payload") && row["tag"] == nil {
				same++
			}
		}
		if same > len(want)/2 {
			t.Fatalf("%d of %d source rows read as before the rewrite: it changed too little to test anything", same, len(want))
		}
	}

	checkSilver(t, r, srcURL, wh, source, []string{"items"})
	py := os.Getenv("TIDEMARK_PYTHON")
	if py == "" {
		t.Log("TIDEMARK_PYTHON is not set: silver not read with PyIceberg")
		return
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	compareAllColumns(t, "PyIceberg read of silver", want, pyRows(t, py, filepath.Join(root, "scripts", "pyiceberg_read.py"),
		"--warehouse", wh, "silver."+source+".public.items"))
}

// sameRow reports whether a and b hold the same value in column c.
func sameRow(a, b bronzetest.Row, c string) bool { return sameValue(a[c], b[c]) }

// compareAllColumns compares every source column of want's rows with got's,
// by key.
func compareAllColumns(t *testing.T, what string, want, got map[string]bronzetest.Row) {
	t.Helper()
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 20 {
			t.Errorf(what+": "+format, args...)
		}
	}
	for _, k := range sortedKeys(want) {
		g, ok := got[k]
		if !ok {
			report("key %s is in the source but not in %s", k, what)
			continue
		}
		for c, v := range want[k] {
			if !sameValue(v, g[c]) {
				report("key %s column %s: source %s, got %s", k, c, showValue(v), showValue(g[c]))
			}
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			report("key %s is not in the source", k)
		}
	}
	if bad > 20 {
		t.Errorf("%s: ... %d mismatches in all", what, bad)
	}
	t.Logf("%s: %d source rows, %d rows, %d mismatches", what, len(want), len(got), bad)
}

// TestRewriteNotForTruncate: a TRUNCATE also gives the table a new
// relfilenode, but it emits a change event (bronze's `t` row): tidemark
// records the new relfilenode without reading the table again, also when
// it is killed right after the truncate.
func TestRewriteNotForTruncate(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "e2e_rewrite_truncate")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `
		CREATE TABLE items (id bigint PRIMARY KEY, version int NOT NULL, payload text);
		INSERT INTO items SELECT g, 1, md5(g::text) FROM generate_series(1, 500) g;`)
	r, wh := newRunner(t, bin, srcURL, "--publication-poll", "200ms")
	lk := openLake(t, wh, source)
	s := r.Start()
	lk.waitCaughtUp(s, walLSN(t, srcURL), 2*time.Minute, "items")
	filenode := func() string {
		c := connect(t, srcURL)
		defer c.Close(context.Background())
		var fn string
		if err := c.QueryRow(context.Background(), `SELECT relfilenode::text FROM pg_class WHERE oid = 'items'::regclass`).Scan(&fn); err != nil {
			t.Fatal(err)
		}
		return fn
	}
	for i, kill := range []bool{false, true} {
		pg.Exec(t, srcURL, fmt.Sprintf(`TRUNCATE items; INSERT INTO items SELECT g, %d, md5(g::text) FROM generate_series(1, 300) g;`, i+2))
		if kill {
			lk.waitCaughtUp(s, walLSN(t, srcURL), time.Minute, "items")
			s.Kill(t)
			s = r.Start()
		}
		fn := filenode()
		waitFor(t, s, time.Minute, "bronze to record the truncated table's relfilenode", func() bool {
			return bronzeSummary(t, wh, source, "items")["tidemark.relfilenode"] == fn
		})
		if req := bronzeSummary(t, wh, source, "items")[pipeline.PropResnapshot]; req != "" {
			t.Fatalf("after TRUNCATE %d bronze records re-snapshot request %q: a truncate was taken for a rewrite", i+1, req)
		}
	}
	lk.waitCaughtUp(s, walLSN(t, srcURL), time.Minute, "items")
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	lk.close()
	checkSilver(t, r, srcURL, wh, source, []string{"items"})
}
