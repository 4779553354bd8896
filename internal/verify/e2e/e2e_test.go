// Package e2e_test runs the whole pipeline (capture into bronze, merge into
// silver) against a real PostgreSQL under a random workload, and checks
// that verify finds silver equal while the workload runs, and finds a
// corrupted silver row, through the API and through the tidemark binary.
package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/bronze"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/source/postgres/pgverify"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/verify"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const setup = `
CREATE TABLE accounts (
	id int PRIMARY KEY,
	balance numeric(12,2) NOT NULL,
	owner text,
	big text,
	updated timestamptz,
	data bytea,
	doc jsonb
);
INSERT INTO accounts
SELECT i, i * 10.5, 'owner ' || i || CASE WHEN i % 9 = 0 THEN ' 🌊' ELSE '' END,
	CASE WHEN i % 10 = 0 THEN (SELECT string_agg(md5(random()::text || j), '') FROM generate_series(1, 120) j) END,
	now(), CASE WHEN i % 3 = 0 THEN decode(md5(i::text), 'hex') END, jsonb_build_object('i', i)
FROM generate_series(1, 1500) i;
CREATE TABLE events (
	tenant text,
	seq bigint,
	kind text,
	amount double precision,
	at timestamptz,
	PRIMARY KEY (tenant, seq)
);
INSERT INTO events SELECT t, s, 'k' || (s % 5), s / 3.0, now() FROM unnest(ARRAY['acme', 'ünï']) t, generate_series(1, 400) s;
`

func logger() *slog.Logger {
	lvl := slog.LevelWarn
	if testing.Verbose() {
		lvl = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
}

// workload changes both tables at random until stopped: updates that leave
// the TOAST column unchanged, inserts, deletes, an ADD COLUMN.
func workload(ctx context.Context, t *testing.T, url string, seed uint64) (stop func() int) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var n int
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("workload: %v", err)
			return
		}
		defer conn.Close(context.Background())
		r := rand.New(rand.NewPCG(seed, 1))
		added := false
		for ctx.Err() == nil {
			var sql string
			switch k := r.IntN(100); {
			case k < 35:
				sql = fmt.Sprintf(`UPDATE accounts SET balance = balance + %d.25, updated = now() WHERE id = %d`, r.IntN(100), 1+r.IntN(2000))
			case k < 45:
				sql = fmt.Sprintf(`UPDATE accounts SET owner = 'renamed %d', doc = jsonb_build_object('n', %d, 'ü', true) WHERE id = %d`, r.IntN(1000), r.Int64(), 1+r.IntN(2000))
			case k < 55:
				sql = fmt.Sprintf(`INSERT INTO accounts (id, balance, owner, big) VALUES (%d, %d, 'new', repeat('y', %d)) ON CONFLICT (id) DO NOTHING`,
					1+r.IntN(2000), r.IntN(1000), r.IntN(5000))
			case k < 62:
				sql = fmt.Sprintf(`DELETE FROM accounts WHERE id = %d`, 1+r.IntN(2000))
			case k < 80:
				sql = fmt.Sprintf(`INSERT INTO events VALUES ('%s', %d, 'w', %g, now()) ON CONFLICT DO NOTHING`,
					[]string{"acme", "ünï", "z z"}[r.IntN(3)], 1+r.IntN(600), r.Float64()*1e6)
			case k < 90:
				sql = fmt.Sprintf(`UPDATE events SET amount = amount * -1.5, kind = 'upd' WHERE seq = %d`, 1+r.IntN(600))
			case k < 97:
				sql = fmt.Sprintf(`DELETE FROM events WHERE tenant = 'acme' AND seq = %d`, 1+r.IntN(600))
			default:
				// a multi-statement transaction
				a, b := 1+r.IntN(2000), 1+r.IntN(2000)
				sql = fmt.Sprintf(`BEGIN; UPDATE accounts SET balance = balance - 1 WHERE id = %d; UPDATE accounts SET balance = balance + 1 WHERE id = %d; COMMIT`, a, b)
			}
			if !added && n == 300 {
				sql = `ALTER TABLE accounts ADD COLUMN flag boolean`
				added = true
			} else if added && r.IntN(10) == 0 { // not in the ALTER's own iteration
				sql = fmt.Sprintf(`UPDATE accounts SET flag = %v WHERE id = %d`, r.IntN(2) == 0, 1+r.IntN(2000))
			}
			if _, err := conn.Exec(ctx, sql); err != nil {
				if ctx.Err() != nil {
					return
				}
				t.Errorf("workload: %s: %v", sql, err)
				return
			}
			n++
			time.Sleep(time.Duration(r.IntN(3)) * time.Millisecond)
		}
	}()
	return func() int { cancel(); wg.Wait(); return n }
}

func TestVerifyLivePipeline(t *testing.T) {
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "e2e")
	pg.Exec(t, url, setup)
	wh := t.TempDir()
	log := logger()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: wh})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	const source = "src"
	d, err := postgres.NewDialer(url, func(string) string { return "redacted" })
	if err != nil {
		t.Fatal(err)
	}

	// Capture.
	w, err := bronze.NewWriter(ctx, cat, source, "tidemark_e2e", log)
	if err != nil {
		t.Fatal(err)
	}
	capCtx, capStop := context.WithCancel(ctx)
	capDone := make(chan error, 1)
	c := postgres.New(d, w, postgres.Options{
		Slot: "tidemark_e2e", Publication: "tidemark_e2e", SpoolDir: filepath.Join(wh, "spool"),
		CommitInterval: 100 * time.Millisecond, CommitBytes: 8 << 20, HeartbeatInterval: 100 * time.Millisecond,
		PublicationPoll: 300 * time.Millisecond,
		Snapshot:        postgres.SnapshotOptions{Enabled: true, Parallelism: 2, ChunkRows: 300, ChunkBytes: 8 << 20},
	}, log)
	go func() { err := c.Run(capCtx); c.Close(); w.Close(); capDone <- err }()
	defer func() {
		capStop()
		if err := <-capDone; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("capture: %v", err)
		}
	}()

	// Merge, continuously.
	mCtx, mStop := context.WithCancel(ctx)
	mDone := make(chan error, 1)
	m := silver.NewMerger(cat, silver.Options{Buckets: 4}, log)
	go func() { mDone <- m.Run(mCtx, source, 200*time.Millisecond) }()
	stopMerge := func() {
		mStop()
		if err := <-mDone; err != nil {
			t.Fatalf("merge: %v", err)
		}
	}

	stopWork := workload(ctx, t, url, uint64(time.Now().UnixNano()))
	waitPublished(t, ctx, cat, source, "accounts", "events")

	// The contract verify relies on is silver's.
	if got := silver.Ident(source, "public", "accounts"); strings.Join(got, ".") != "silver.src.public.accounts" {
		t.Fatalf("silver identifier %v", got)
	}

	// While the workload runs: no false alarm.
	for i := 0; i < 2; i++ {
		rep, err := verify.Run(ctx, cat, pgverify.New(d), verify.Options{Source: source, Wait: time.Minute, Rounds: 10}, log)
		if err != nil {
			t.Fatal(err)
		}
		logReport(t, rep)
		for _, tr := range rep.Tables {
			if tr.Status != verify.StatusEqual {
				t.Fatalf("live run %d: %s is %s (%s)", i, tr.Table, tr.Status, tr.Reason)
			}
		}
	}
	ops := stopWork()
	t.Logf("workload: %d statements", ops)
	if ops < 300 {
		t.Fatalf("the workload ran only %d statements", ops)
	}

	// At rest: equal, and the added column is compared too.
	rep, err := verify.Run(ctx, cat, pgverify.New(d), verify.Options{Source: source, Wait: time.Minute}, log)
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, rep)
	if rep.ExitCode() != 0 {
		t.Fatalf("at rest: exit %d", rep.ExitCode())
	}

	// Corrupt one silver row, keeping silver's cursor: verify must name it.
	stopMerge()
	var id int32
	if err := pgxQueryRow(ctx, url, `SELECT min(id) FROM accounts WHERE big IS NOT NULL`, &id); err != nil {
		t.Fatal(err)
	}
	corrupt(t, ctx, cat, source, id)
	rep, err = verify.Run(ctx, cat, pgverify.New(d), verify.Options{Source: source, Wait: time.Minute}, log)
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, rep)
	tr := rep.Tables[0]
	if tr.Source != "public.accounts" || tr.Status != verify.StatusDifferent || tr.DifferencesTotal != 1 ||
		tr.Differences[0].Key != fmt.Sprintf("id=%d", id) || tr.Differences[0].Columns[0].Column != "balance" {
		t.Fatalf("after corrupting id=%d: %+v", id, tr)
	}
	if rep.ExitCode() != verify.ExitDifferences || rep.Tables[1].Status != verify.StatusEqual {
		t.Fatalf("exit %d, events %s", rep.ExitCode(), rep.Tables[1].Status)
	}

	// The command line says the same, with its exit code.
	bin := buildTidemark(t)
	cmd := exec.CommandContext(ctx, bin, "verify", "--source", url, "--warehouse", wh, "--name", source, "--wait", "1m")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != verify.ExitDifferences {
		t.Fatalf("tidemark verify: %v, want exit %d\nstdout:\n%s\nstderr:\n%s", err, verify.ExitDifferences, &stdout, &stderr)
	}
	out := stdout.String()
	if !strings.Contains(out, fmt.Sprintf("key id=%d: values differ", id)) || !strings.Contains(out, "balance: source ") ||
		strings.Contains(out+stderr.String(), pg.Password) {
		t.Fatalf("tidemark verify output:\n%s\nstderr:\n%s", out, &stderr)
	}
	t.Logf("tidemark verify:\n%s%s", out, &stderr)
	cmd = exec.CommandContext(ctx, bin, "verify", "--source", url, "--warehouse", wh, "--name", source, "--tables", "public.events", "--format", "json")
	if out, err := cmd.CombinedOutput(); err != nil || !bytes.Contains(out, []byte(`"status": "equal"`)) {
		t.Fatalf("tidemark verify --tables public.events: %v\n%s", err, out)
	}
}

func pgxQueryRow(ctx context.Context, url, sql string, dst ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql).Scan(dst...)
}

func logReport(t *testing.T, rep *verify.Report) {
	t.Helper()
	var b strings.Builder
	_ = rep.Write(&b, "table")
	t.Logf("verify:\n%s", b.String())
}

// waitPublished waits until the tables' silver tables exist.
func waitPublished(t *testing.T, ctx context.Context, cat *lake.Catalog, source string, tables ...string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for _, tbl := range tables {
		for {
			if _, err := cat.LoadTable(ctx, silver.Ident(source, "public", tbl)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				st, _ := silver.State(ctx, cat, source, "public", tbl)
				t.Fatalf("silver table of %s not published within 2m: %+v", tbl, st)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// corrupt changes the balance of one silver accounts row in a commit that
// keeps silver's cursor and position, as a faulty merge would.
func corrupt(t *testing.T, ctx context.Context, cat *lake.Catalog, source string, id int32) {
	t.Helper()
	tbl, err := cat.LoadTable(ctx, silver.Ident(source, "public", "accounts"))
	if err != nil {
		t.Fatal(err)
	}
	var row arrow.RecordBatch
	err = tbl.ScanWhere(ctx, lake.Equal("id", id), func(rec arrow.RecordBatch) error {
		ids := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int32)
		for i := 0; i < ids.Len(); i++ {
			if ids.Value(i) == id {
				row = rec.NewSlice(int64(i), int64(i+1))
			}
		}
		return nil
	})
	if err != nil || row == nil {
		t.Fatalf("read silver row id=%d: %v", id, err)
	}
	defer row.Release()
	bi := row.Schema().FieldIndices("balance")[0]
	old := row.Column(bi).(*array.Decimal128)
	b := array.NewDecimal128Builder(memory.DefaultAllocator, old.DataType().(*arrow.Decimal128Type))
	b.Append(old.Value(0).Add(decimal128.FromI64(1))) // one cent more
	cols := append([]arrow.Array(nil), row.Columns()...)
	cols[bi] = b.NewArray()
	b.Release()
	rec := array.NewRecordBatch(row.Schema(), cols, 1)
	defer rec.Release()
	sum := tbl.Summary()
	props := map[string]string{}
	for _, k := range []string{silver.PropBronzeSnapshot, silver.PropPosition, silver.PropWatermark} {
		props[k] = sum[k]
	}
	if err := tbl.Merge(ctx, lake.Equal("id", id), []arrow.RecordBatch{rec}, props); err != nil {
		t.Fatal(err)
	}
}

// buildTidemark builds the binary once per test binary.
func buildTidemark(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(t.TempDir(), "tidemark")
	build := exec.Command("go", "build", "-o", bin, "./cmd/tidemark")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
