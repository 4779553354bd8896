package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/testenv"
)

const canary = "Canary-P@ss-7f3"

func testConfig(t *testing.T, url, wh string, extra ...string) *config.Config {
	t.Helper()
	cfg := &config.Config{Source: config.NewSecret(url), Warehouse: wh, Name: "src"}
	cfg.CommitInterval = config.Duration(100 * time.Millisecond)
	cfg.HeartbeatInterval = config.Duration(100 * time.Millisecond)
	cfg.Retry.InitialBackoff = config.Duration(100 * time.Millisecond)
	cfg.Retry.MaxBackoff = config.Duration(500 * time.Millisecond)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// syncBuffer is a goroutine-safe bytes.Buffer.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestTailStreamsChangesAsJSON(t *testing.T) {
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "tail")
	pg.Exec(t, url, `CREATE TABLE orders (id int primary key, amount numeric(10,2), note text)`)
	cfg := testConfig(t, url, t.TempDir())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- app.Tail(context.Background(), cfg, app.TailOptions{MaxRecords: 3, MaxDuration: 60 * time.Second}, &out, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	// Wait for tail's temporary slot, then change rows.
	deadline := time.Now().Add(30 * time.Second)
	for !hasSlot(t, url, "tidemark_tail_%") {
		if time.Now().After(deadline) {
			t.Fatal("tail did not create its temporary slot")
		}
		time.Sleep(50 * time.Millisecond)
	}
	pg.Exec(t, url, `INSERT INTO orders VALUES (1, 9.99, 'first')`)
	pg.Exec(t, url, `UPDATE orders SET amount = 10.50 WHERE id = 1`)
	pg.Exec(t, url, `DELETE FROM orders WHERE id = 1`)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tail: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("tail did not stop after --max-records 3")
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("tail printed %d lines, want 3:\n%s", len(lines), out.String())
	}
	var evs []map[string]any
	for _, l := range lines {
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("not JSON: %s", l)
		}
		evs = append(evs, e)
	}
	ops := []string{evs[0]["op"].(string), evs[1]["op"].(string), evs[2]["op"].(string)}
	if strings.Join(ops, "") != "cud" {
		t.Errorf("ops = %v, want c u d", ops)
	}
	after := evs[1]["after"].(map[string]any)
	if after["amount"] != "10.50" || after["note"] != "first" {
		t.Errorf("update after = %v, want amount 10.50 (exact decimal) and note", after)
	}
	src := evs[0]["source"].(map[string]any)
	if src["table"] != "orders" || src["schema"] != "public" || src["lsn"] == nil || src["txId"] == nil {
		t.Errorf("source block = %v", src)
	}
	if evs[2]["before"].(map[string]any)["id"] != float64(1) {
		t.Errorf("delete before = %v, want the key", evs[2]["before"])
	}
	// The temporary slot is gone and no pipeline slot was created. A
	// temporary slot goes when its walsender has exited, which may lag the
	// client's exit by a moment.
	for deadline := time.Now().Add(15 * time.Second); hasSlot(t, url, "tidemark_%"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Error("a replication slot remains after tail exited")
			break
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func hasSlot(t *testing.T, url, like string) bool {
	t.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1`, like).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

func TestRunSurvivesPostgresRestart(t *testing.T) {
	pg, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	url := pg.CreateDB(t, "restart")
	pg.Exec(t, url, `CREATE TABLE r (id int primary key, v text); INSERT INTO r SELECT g, 'old' FROM generate_series(1, 100) g`)
	wh := t.TempDir()
	cfg := testConfig(t, url, wh)
	cfg.MetricsAddr = freeAddr(t)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, cfg, log) }()
	defer func() {
		cancel()
		<-done
	}()
	waitRows := func(n int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			rows := tryRead(wh, "bronze", "src", "public", "r")
			if len(rows) >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("bronze has %d rows, want %d; log:\n%s", len(rows), n, logs.String())
			}
			select {
			case err := <-done:
				// Run stopped (a port taken between freeAddr and the
				// metrics listener, say): say why instead of waiting.
				done <- err
				t.Fatalf("run stopped with bronze at %d rows of %d: %v; log:\n%s", len(rows), n, err, logs.String())
			default:
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitRows(100)
	for i := 0; i < 3; i++ {
		if err := pg.Restart(); err != nil {
			t.Fatal(err)
		}
		pg.Exec(t, url, `INSERT INTO r SELECT g, 'after restart' FROM generate_series((SELECT max(id) + 1 FROM r), (SELECT max(id) + 10 FROM r)) g`)
	}
	waitRows(130)
	// The walsender is terminated (an admin, a failover tool): reconnect and resume.
	for i := 0; i < 3; i++ {
		pg.Exec(t, url, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE active_pid IS NOT NULL`)
		pg.Exec(t, url, `INSERT INTO r SELECT g, 'after terminate' FROM generate_series((SELECT max(id) + 1 FROM r), (SELECT max(id) + 10 FROM r)) g`)
		time.Sleep(300 * time.Millisecond)
	}
	waitRows(160)
	// Progress is visible as metrics.
	resp, err := http.Get("http://" + cfg.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"tidemark_bronze_rows_committed_total", "tidemark_capture_lag_bytes", "tidemark_capture_confirmed_lsn", `tidemark_capture_errors_total{class="transient",source="src"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
	if strings.Contains(string(body), pg.Password) {
		t.Error("the source password appears in the metrics")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	done <- nil
	rows := tryRead(wh, "bronze", "src", "public", "r")
	if d := bronzetest.Duplicates(rows); len(d) > 0 {
		t.Errorf("duplicates after restarts: %v", d)
	}
	if !strings.Contains(logs.String(), "transient error, retrying") {
		t.Errorf("expected the restarts to be retried as transient errors; log:\n%s", logs.String())
	}
	if len(rows) != 160 {
		t.Errorf("bronze rows = %d, want 160", len(rows))
	}
}

// tryRead reads a lake table, returning nil while it does not exist yet.
func tryRead(wh string, ident ...string) []bronzetest.Row {
	var rows []bronzetest.Row
	ok := func() (ok bool) {
		defer func() {
			if recover() != nil {
				ok = false
			}
		}()
		ft := &fakeTB{}
		rows = bronzetest.Read(ft, wh, ident...)
		return !ft.failed
	}()
	if !ok {
		return nil
	}
	return rows
}

// fakeTB lets bronzetest.Read be polled without failing the test.
type fakeTB struct {
	testing.TB
	failed bool
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Fatal(...any)          { f.failed = true; panic("fatal") }
func (f *fakeTB) Fatalf(string, ...any) { f.failed = true; panic("fatal") }
func (f *fakeTB) Errorf(string, ...any) { f.failed = true }
func (f *fakeTB) Cleanup(func())        {}
func (f *fakeTB) Logf(string, ...any)   {}
func (f *fakeTB) TempDir() string       { return os.TempDir() }

func TestSecretsNeverReachOutput(t *testing.T) {
	t.Parallel() // its own database, warehouse and tidemark processes
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "secrets")
	pg.Exec(t, url, `CREATE TABLE s (id int primary key); CREATE ROLE canary LOGIN PASSWORD '`+canary+`' REPLICATION; GRANT SELECT ON s TO canary; CREATE PUBLICATION tidemark_sec FOR TABLE s;`)
	good := strings.Replace(url, "postgres:"+pg.Password+"@", "canary:"+strings.ReplaceAll(canary, "@", "%40")+"@", 1)
	wrong := strings.Replace(url, "postgres:"+pg.Password+"@", "postgres:"+strings.ReplaceAll(canary, "@", "%40")+"@", 1)
	cases := []struct {
		name     string
		args     []string
		wantCode int
		runFor   time.Duration
	}{
		{"malformed URL", []string{"run", "--source", "postgres://u:" + canary + "@[::1/db", "--warehouse", t.TempDir()}, fault.ExitConfig, 0},
		{"malformed URL 2", []string{"run", "--source", "postgres://u:" + canary + "@host:notaport/db", "--warehouse", t.TempDir()}, fault.ExitConfig, 0},
		{"wrong password", []string{"run", "--source", wrong, "--warehouse", t.TempDir(), "--log-level", "debug", "--retry-max-elapsed", "1s"}, fault.ExitConfig, 0},
		{"debug logging of a working pipeline", []string{"run", "--source", good, "--warehouse", t.TempDir(), "--log-level", "debug", "--name", "sec"}, -1, 3 * time.Second},
		{"tail with a malformed URL", []string{"tail", "--source", "postgresql://u:" + canary + "@h:5432/db?sslmode=bogus"}, -2, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if tc.runFor > 0 {
				time.Sleep(tc.runFor)
				cmd.Process.Signal(os.Interrupt)
			}
			err := cmd.Wait()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			for _, s := range []string{canary, strings.ReplaceAll(canary, "@", "%40")} {
				if strings.Contains(out.String(), s) {
					t.Fatalf("the password appears in the output:\n%s", out.String())
				}
			}
			switch {
			case tc.wantCode >= 0 && code != tc.wantCode:
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.wantCode, out.String())
			case tc.wantCode == -1 && code != 0:
				t.Errorf("clean stop exit code %d, want 0; output:\n%s", code, out.String())
			case tc.wantCode == -2 && code == 0:
				t.Errorf("exit code 0 for a bad URL; output:\n%s", out.String())
			}
		})
	}
}
