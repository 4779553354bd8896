package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/app"
	shape "github.com/tidemark/tidemark/internal/event"
	"github.com/tidemark/tidemark/internal/testenv"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenWorkload is the changes the golden files hold, one record each:
// an insert with a TOASTed text, an update leaving it unchanged (pgoutput
// does not send it), a delete, an insert of NULLs and non-finite floats, a
// logical message, a truncate.
var goldenWorkload = []string{
	`INSERT INTO golden VALUES (1, 7, 9.99, 'first <&>', repeat('x', 2500), '2024-05-06', '2024-05-06 07:08:09.5',
		'2024-05-06 07:08:09.5+02', true, '\x00ff', 1.5, '{a,NULL}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"k": [1, 2]}')`,
	`UPDATE golden SET amount = -10.50, note = 'second' WHERE id = 1`,
	`DELETE FROM golden WHERE id = 1`,
	`INSERT INTO golden (id, score) VALUES (2, 'NaN')`,
	`SELECT pg_logical_emit_message(true, 'golden', 'hello')`,
	`TRUNCATE golden`,
}

// TestTailFormatsGolden: `tail --format tidemark|debezium|beam` (and
// debezium with its schema) print the golden files' events for a real
// PostgreSQL workload, volatile fields (times, LSNs, transaction ids, the
// database's name) normalised. go test -run TestTailFormatsGolden -update
// rewrites them.
func TestTailFormatsGolden(t *testing.T) {
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "tailgolden")
	pg.Exec(t, url, `CREATE TABLE golden (id int PRIMARY KEY, small smallint, amount numeric(10,2), note text, big text,
		day date, placed timestamp(6), at timestamptz, flag boolean, data bytea, score double precision, tags text[],
		uid uuid, doc jsonb);
		ALTER TABLE golden ALTER big SET STORAGE EXTERNAL`)
	cfg := testConfig(t, url, t.TempDir())
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		golden string
		opts   app.TailOptions
	}{
		{"tidemark", app.TailOptions{Format: shape.Tidemark}},
		{"debezium", app.TailOptions{Format: shape.Debezium}},
		{"debezium-schema", app.TailOptions{Format: shape.Debezium, DebeziumSchema: true}},
		{"beam", app.TailOptions{Format: shape.Beam}},
	}
	outs := make([]*syncBuffer, len(cases))
	done := make(chan error, len(cases))
	for i, c := range cases {
		outs[i] = &syncBuffer{}
		opts := c.opts
		opts.MaxRecords, opts.MaxDuration, opts.Version = len(goldenWorkload), 2*time.Minute, "test"
		go func() {
			done <- app.Tail(context.Background(), cfg, opts, outs[i], slog.New(slog.NewTextHandler(io.Discard, nil)))
		}()
		// One at a time: slot names hold the process id and the time.
		waitSlots(t, url, pc.Database, i+1)
	}
	for _, q := range goldenWorkload {
		pg.Exec(t, url, q)
	}
	for range cases {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("tail: %v", err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("a tail did not stop after its records")
		}
	}
	for i, c := range cases {
		got := normaliseEvents(outs[i].String(), pc.Database)
		path := filepath.Join("testdata", "tail", c.golden+".jsonl")
		if *updateGolden {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -run TestTailFormatsGolden -update writes it)", err)
		}
		if got != string(want) {
			gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
			for j := 0; j < len(gl) || j < len(wl); j++ {
				var g, w string
				if j < len(gl) {
					g = gl[j]
				}
				if j < len(wl) {
					w = wl[j]
				}
				if g != w {
					t.Errorf("--format %s: line %d differs from %s\n got: %s\nwant: %s", c.golden, j+1, path, g, w)
					break
				}
			}
		}
	}
}

// waitSlots waits until database db has n replication slots of tail's.
func waitSlots(t *testing.T, url, db string, n int) {
	t.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var got int
		if err := c.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_replication_slots WHERE database = $1 AND slot_name LIKE 'tidemark_tail_%' AND active`, db).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tail slots after 30s, want %d", got, n)
		}
	}
}

var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"(ts_ms|ts_us|ts_ns|lsn|txId)":-?\d+`), `"$1":0`},
	{regexp.MustCompile(`"sequence":"\[\\"\d+\\",\\"(\d+)\\"\]"`), `"sequence":"[\"0\",\"$1\"]"`},
	{regexp.MustCompile(`"position":"[0-9A-F]+/[0-9A-F]+:(\d+)"`), `"position":"0/0:$1"`},
	{regexp.MustCompile(`"commit_time":"[^"]*"`), `"commit_time":"0001-01-01T00:00:00Z"`},
}

// normaliseEvents replaces what changes from run to run in tail's output:
// times, LSNs, transaction ids, the database's name.
func normaliseEvents(out, db string) string {
	out = strings.ReplaceAll(out, `"`+db+`"`, `"DB"`)
	for _, v := range volatile {
		out = v.re.ReplaceAllString(out, v.with)
	}
	return out
}

// TestTailDebugLogsNoPassword: `tidemark tail --log-level debug` with the
// password in the source URL, streaming changes, never prints the
// password: not in its logs (stderr), not in its output.
func TestTailDebugLogsNoPassword(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "tailcanary")
	pg.Exec(t, url, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if pc.Password == "" || !strings.Contains(url, pc.Password) {
		t.Fatal("the test server's URL carries no password")
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "tail", "--source", url, "--log-level", "debug", "--format", "debezium",
		"--max-records", "2", "--max-duration", "2m")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	waitSlots(t, url, pc.Database, 1)
	pg.Exec(t, url, `INSERT INTO t VALUES (1, 'a'); UPDATE t SET v = 'b' WHERE id = 1`)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tail: %v\n%s", err, &stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("tail did not stop after --max-records 2")
	}
	if n := strings.Count(strings.TrimSpace(stdout.String()), "\n") + 1; n != 2 {
		t.Fatalf("tail printed %d lines, want 2:\n%s", n, &stdout)
	}
	if !strings.Contains(stderr.String(), "level=DEBUG") && !strings.Contains(stderr.String(), `"level":"DEBUG"`) {
		t.Fatalf("no DEBUG line in tail's logs: the canary checks nothing\n%s", &stderr)
	}
	for name, s := range map[string]string{"logs": stderr.String(), "output": stdout.String()} {
		if strings.Contains(s, pc.Password) {
			t.Errorf("the password appears in tail's %s", name)
		}
	}
}

// TestTailPollTimeout: on an idle database `tail --poll-timeout` returns
// (exit 0) once the timeout passes without a record, and a record
// restarts the wait.
func TestTailPollTimeout(t *testing.T) {
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "tailidle")
	pg.Exec(t, url, `CREATE TABLE t (id int PRIMARY KEY)`)
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, url, t.TempDir())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- app.Tail(context.Background(), cfg, app.TailOptions{PollTimeout: 3 * time.Second, MaxDuration: 2 * time.Minute},
			&out, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	waitSlots(t, url, pc.Database, 1)
	pg.Exec(t, url, `INSERT INTO t VALUES (1)`)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tail: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("tail did not return after --poll-timeout on an idle database (before --max-duration)")
	}
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Errorf("tail printed %d records, want the 1 insert:\n%s", n, out.String())
	}
}

// TestTailResumesNamedPosition: `tail --position-name` continues where
// its last run stopped: changes made while no tail ran are printed by the
// next run, and after a clean stop (--poll-timeout) nothing is printed
// twice.
func TestTailResumesNamedPosition(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "tailpos")
	pg.Exec(t, url, `CREATE TABLE t (id int PRIMARY KEY)`)
	dir := t.TempDir()
	tailRun := func(stmts ...string) []string {
		t.Helper()
		var stdout, stderr syncBuffer
		cmd := exec.Command(bin, "tail", "--source", url, "--position-name", "resume_me", "--position-dir", dir,
			"--poll-timeout", "3s", "--max-duration", "2m")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		defer func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				<-done
			}
		}()
		c, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			var active bool
			if err := c.QueryRow(context.Background(), `SELECT coalesce(bool_or(active), false) FROM pg_replication_slots WHERE slot_name = 'tidemark_pos_resume_me'`).Scan(&active); err != nil {
				t.Fatal(err)
			}
			if active {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("tail did not open its slot\n%s", stderr.String())
			}
		}
		for _, q := range stmts {
			pg.Exec(t, url, q)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("tail: %v\n%s", err, stderr.String())
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("tail did not stop after --poll-timeout")
		}
		var ids []string
		for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
			if l == "" {
				continue
			}
			var e struct {
				After map[string]any `json:"after"`
			}
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("not JSON: %s", l)
			}
			ids = append(ids, fmt.Sprint(e.After["id"]))
		}
		return ids
	}
	if got := strings.Join(tailRun("INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (2)"), ","); got != "1,2" {
		t.Fatalf("first run printed ids %s, want 1,2", got)
	}
	// While no tail runs.
	pg.Exec(t, url, "INSERT INTO t VALUES (3)")
	if got := strings.Join(tailRun("INSERT INTO t VALUES (4)"), ","); got != "3,4" {
		t.Fatalf("second run printed ids %s, want 3,4: the change made between the runs, and none again", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "resume_me.json")); err != nil {
		t.Errorf("no checkpoint file: %v", err)
	}
}
