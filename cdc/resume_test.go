package cdc_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/cdc"
)

// consumerRun is one run of the example program examples/consumer.
type consumerRun struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	stderr strings.Builder
	ready  chan struct{}
	done   chan error
}

func startConsumer(t *testing.T, bin, url string, args ...string) *consumerRun {
	t.Helper()
	r := &consumerRun{ready: make(chan struct{}), done: make(chan error, 1)}
	r.cmd = exec.Command(bin, args...)
	r.cmd.Env = append(os.Environ(), "CDC_SOURCE="+url)
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, sc.Text())
			r.mu.Unlock()
		}
	}()
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		var once sync.Once
		for sc.Scan() {
			r.mu.Lock()
			r.stderr.WriteString(sc.Text() + "\n")
			r.mu.Unlock()
			if sc.Text() == "ready" {
				once.Do(func() { close(r.ready) })
			}
		}
	}()
	go func() {
		wg.Wait()
		r.done <- r.cmd.Wait()
	}()
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

func (r *consumerRun) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-r.ready:
	case err := <-r.done:
		t.Fatalf("the consumer exited before it was ready: %v\n%s", err, r.logs())
	case <-time.After(time.Minute):
		t.Fatalf("the consumer is not ready after a minute\n%s", r.logs())
	}
}

func (r *consumerRun) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lines)
}

func (r *consumerRun) logs() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String()
}

// TestResumeAfterSIGKILL: the example program, killed with SIGKILL in the
// middle of a stream of inserts and restarted with its named position,
// receives every change at least once, and exactly once after dedupe on
// the position; the restart ends by its poll timeout once the source is
// idle; DropPosition removes the slot.
func TestResumeAfterSIGKILL(t *testing.T) {
	url := database(t, `CREATE TABLE t (id int PRIMARY KEY)`)
	bin := filepath.Join(t.TempDir(), "consumer")
	if out, err := exec.Command("go", "build", "-o", bin, "./examples/consumer").CombinedOutput(); err != nil {
		t.Fatalf("build the example program: %v\n%s", err, out)
	}
	dir := t.TempDir()
	args := []string{"-position", "killtest", "-dir", dir, "-tables", "public.t", "-max-runtime", "3m"}

	first := startConsumer(t, bin, url, args...)
	first.waitReady(t)
	const total = 400
	wrote := make(chan error, 1)
	go func() {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			wrote <- err
			return
		}
		defer c.Close(ctx)
		for i := 1; i <= total; i++ {
			if _, err := c.Exec(ctx, "INSERT INTO t VALUES ($1)", i); err != nil {
				wrote <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		wrote <- nil
	}()
	for deadline := time.Now().Add(time.Minute); first.count() < 50; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first run printed %d events in a minute\n%s", first.count(), first.logs())
		}
	}
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	// The killed walsender lets go of the slot when PostgreSQL notices.
	waitSlotInactive(t, url, "tidemark_pos_killtest")
	second := startConsumer(t, bin, url, append(args, "-poll-timeout", "5s")...)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-second.done:
		if err != nil {
			t.Fatalf("the second run: %v\n%s", err, second.logs())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("the second run did not stop by its poll timeout\n%s", second.logs())
	}

	type pos struct {
		lsn uint64
		seq int64
	}
	seen := map[int]int{}    // id -> deliveries
	byPos := map[pos]int{}   // position -> id
	deduped := map[int]int{} // id -> distinct positions
	lines := append(append([]string{}, first.lines...), second.lines...)
	for _, l := range lines {
		var e struct {
			Op    string         `json:"op"`
			After map[string]any `json:"after"`
			Src   struct {
				LSN uint64 `json:"lsn"`
				Seq int64  `json:"seq"`
			} `json:"source"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		if e.Op != "c" {
			t.Fatalf("unexpected event %s", l)
		}
		id := int(e.After["id"].(float64))
		seen[id]++
		p := pos{e.Src.LSN, e.Src.Seq}
		if old, ok := byPos[p]; ok {
			if old != id {
				t.Fatalf("position %v carries id %d and id %d", p, old, id)
			}
			continue
		}
		byPos[p] = id
		deduped[id]++
	}
	var missing, twice []int
	for i := 1; i <= total; i++ {
		if seen[i] == 0 {
			missing = append(missing, i)
		}
		if deduped[i] > 1 {
			twice = append(twice, i)
		}
	}
	if len(missing) > 0 || len(twice) > 0 || len(deduped) != total {
		t.Fatalf("after SIGKILL and restart: missing %v, twice after dedupe %v, %d ids (want %d)\nfirst run %d lines, second %d\n%s",
			missing, twice, len(deduped), total, len(first.lines), len(second.lines), second.logs())
	}
	t.Logf("first run %d events, second %d, redelivered %d", len(first.lines), len(second.lines), len(lines)-total)

	cfg := cdc.Config{Source: url, PositionName: "killtest", PositionDir: dir}
	if err := cdc.DropPosition(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if slotExists(t, url, "tidemark_pos_killtest") {
		t.Error("DropPosition left the slot")
	}
	if _, err := os.Stat(filepath.Join(dir, "killtest.json")); !os.IsNotExist(err) {
		t.Errorf("DropPosition left the checkpoint file: %v", err)
	}
}

func slotExists(t *testing.T, url, slot string) bool {
	t.Helper()
	var n int
	queryRow(t, url, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", []any{slot}, &n)
	return n > 0
}

func waitSlotInactive(t *testing.T, url, slot string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var active bool
		queryRow(t, url, "SELECT coalesce(bool_or(active), false) FROM pg_replication_slots WHERE slot_name = $1", []any{slot}, &active)
		if !active {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s still active a minute after its reader was killed", slot)
		}
	}
}

func queryRow(t *testing.T, url, q string, args []any, dst ...any) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := c.QueryRow(ctx, q, args...).Scan(dst...); err != nil {
		t.Fatal(fmt.Errorf("%s: %w", q, err))
	}
}
