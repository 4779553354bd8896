//go:build faults

package faults_test

// The harness: the binary, PostgreSQL servers, tidemark sessions as
// subprocesses, the workload, the oracle and the fault table.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/testenv"
)

var iterations = flag.Int("iterations", 0, "crash-loop iterations of the full suite (default 10, or $TIDEMARK_FAULTS_ITERATIONS; make faults uses 50)")

func fullIterations() int {
	if *iterations > 0 {
		return *iterations
	}
	if n, err := strconv.Atoi(os.Getenv("TIDEMARK_FAULTS_ITERATIONS")); err == nil && n > 0 {
		return n
	}
	return 10
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := testenv.Main(m) // also removes the tidemark binary built for the tests
	printTable()
	for _, pg := range servers.list {
		if err := pg.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "faults: stop PostgreSQL: %v\n", err)
		}
	}
	os.Exit(code)
}

// ---------------------------------------------------------------------------
// The fault table

type result struct {
	row        string // RELIABILITY.md row and fault
	injections string
	outcome    string
	lost       string
}

var table struct {
	mu   sync.Mutex
	rows []result
}

// record adds a line to the fault table when the test ends; its outcome is
// the test's (FAIL if it failed, else ok plus note).
func record(t *testing.T, row string, injections *int, lost *int, note *string) {
	t.Cleanup(func() {
		out := "ok"
		if t.Failed() {
			out = "FAIL"
		}
		if t.Skipped() {
			out = "skipped"
		}
		if note != nil && *note != "" {
			out += " (" + *note + ")"
		}
		l := "-"
		if lost != nil && *lost >= 0 {
			l = strconv.Itoa(*lost)
		}
		table.mu.Lock()
		table.rows = append(table.rows, result{row: row + " [" + t.Name() + "]", injections: strconv.Itoa(*injections), outcome: out, lost: l})
		table.mu.Unlock()
	})
}

// covered are matrix rows that capture-level tests prove; listed so the
// table shows the whole picture.
var covered = []result{
	{"3 commit outcome unknown", "-", "covered: internal/source/postgres TestCommitOutcomeUnknown (every append answer lost: the retry finds its own snapshot; a flush answer lost: next session dedupes by cursor)", "-"},
	{"4 second writer on a table / pipeline", "-", "covered: internal/source/postgres TestSecondWriter (commit_conflict, bounded retry), TestNamedErrors/second_writer_on_the_same_pipeline (already_running)", "-"},
	{"7 slot dropped and recreated while stopped", "-", "covered: internal/source/postgres TestNamedErrors/slot_recreated_behind_our_back (slot_moved); recovery: internal/app TestResnapshotRecoversBrokenSlot", "-"},
	{"7 slot dropped while stopped", "-", "covered: internal/source/postgres TestNamedErrors/slot_dropped (slot_lost, exit 3); recovery: internal/app TestResnapshotRecoversBrokenSlot/slot_lost", "-"},
	{"8 slot dropped while running", "-", "covered also: internal/source/postgres TestSlotDroppedWhileRunning", "-"},
	{"9 needed WAL removed", "-", "covered: internal/source/postgres TestWALLostIsNamed (wal_lost, exit 3); recovery: internal/app TestResnapshotAfterWALLost", "-"},
	{"10 idle published, busy unpublished tables", "-", "covered: internal/source/postgres TestHeartbeatsAdvanceTheSlotOnUnpublishedWrites (with a no-heartbeat control)", "-"},
	{"11 unchanged TOAST value", "-", "covered: internal/source/postgres TestSnapshotAndStreamBasics, internal/silver TestMergeUpsertsDeletesAndTOAST, internal/app TestE2EUnchangedToastAcrossKeyChange", "-"},
	{"12 table without a key", "-", "covered: internal/app TestKeylessTableBronzeOnly (bronze only across kill -9), TestNoTableBlocksTheOthers; internal/source/postgres TestKeylessTableJoiningThePublication (bronze only, keyed once it has a key), TestNamedErrors/no_primary_key (listed in --tables: bronze only)", "-"},
	{"13 streamed txn with rolled-back savepoint", "-", "covered: internal/source/postgres TestStreamedTransactionWithRolledBackSavepoint (exactly 505 rows)", "-"},
	{"15 TRUNCATE", "-", "covered: internal/silver TestSilverEqualsTheSource, TestTruncate; internal/app TestE2ECrashRecovery", "-"},
	{"16 schema change mid-stream and while stopped", "-", "covered: internal/source/postgres TestSnapshotAndStreamBasics, TestSchemaChangeWhileStopped (incompatible_schema for text->int); internal/silver TestSchemaEvolution", "-"},
	{"17 writes and DDL during the snapshot", "-", "covered: internal/source/postgres TestWritesAndDDLDuringTheSnapshot (3 writers + ADD COLUMN + ALTER TYPE)", "-"},
	{"33 DDL that rewrites rows without change events", "-", "covered for ADD COLUMN … DEFAULT <constant> (nullable and NOT NULL, while running and while stopped, kill -9 around each): internal/app TestE2EAddColumnWithDefault, internal/silver TestMergeGivesOlderRowsTheDefault, internal/bronze TestRowsWithoutAnAddedColumnGetItsDefault; volatile defaults, ALTER COLUMN TYPE … USING, VACUUM FULL, CLUSTER (relfilenode changed: online re-read, killed during it or stopped across the rewrite): internal/app TestRewriteVolatileDefault, TestRewriteSequenceDefaultKilledBeforeMarker, TestRewriteAlterTypeUsing, TestRewriteVacuumFull, TestRewriteCluster; a TRUNCATE is not taken for one: TestRewriteNotForTruncate", "-"},
	{"21 huge values", "-", "covered: internal/source/postgres TestHugeValuePasses (16 MiB); a 200 MB value under a memory limit is NOT proven", "-"},
	{"22-24 special numbers, time values, JSON, odd identifiers", "-", "covered: internal/app TestBadInputSpecialValues, TestBadInputIdentifiers, TestBadInputRefusedIdentifiers, TestBadInputRefusedAfterStart", "-"},
	{"30 TLS", "-", "covered: internal/source/postgres TestTLS (verify-full captures; wrong host / unknown CA: bad_config, exit 2)", "-"},
	{"31 least privilege", "-", "covered also: internal/source/postgres TestLeastPrivilegeRole, TestLeastPrivilegeOwnerCreatesPublication", "-"},
}

func printTable() {
	table.mu.Lock()
	rows := append([]result(nil), table.rows...)
	table.mu.Unlock()
	if len(rows) == 0 {
		return
	}
	sort.SliceStable(rows, func(i, j int) bool { return rowNum(rows[i].row) < rowNum(rows[j].row) })
	rows = append(rows, covered...)
	w := [4]int{len("fault"), len("injections"), len("outcome"), len("rows lost")}
	for _, r := range rows {
		for i, s := range []string{r.row, r.injections, r.outcome, r.lost} {
			w[i] = max(w[i], len(s))
		}
	}
	var b strings.Builder
	line := func(a, b2, c, d string) {
		fmt.Fprintf(&b, "| %-*s | %-*s | %-*s | %-*s |\n", w[0], a, w[1], b2, w[2], c, w[3], d)
	}
	b.WriteString("\nfault table (RELIABILITY.md rows):\n")
	line("fault", "injections", "outcome", "rows lost")
	line(strings.Repeat("-", w[0]), strings.Repeat("-", w[1]), strings.Repeat("-", w[2]), strings.Repeat("-", w[3]))
	for _, r := range rows {
		line(r.row, r.injections, r.outcome, r.lost)
	}
	fmt.Print(b.String())
	if p := os.Getenv("TIDEMARK_FAULTS_REPORT"); p != "" {
		_ = os.WriteFile(p, []byte(b.String()), 0o644)
	}
}

// rowNum is the matrix row a table line starts with ("2/3 crash …" is 2).
func rowNum(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, _ := strconv.Atoi(s[:i])
	return n
}

// ---------------------------------------------------------------------------
// The binary and the servers

var servers struct {
	mu    sync.Mutex
	byKey map[string]*testenv.PG
	list  []*testenv.PG
}

// server returns a PostgreSQL server with the given extra settings, one per
// distinct settings for the whole run. Fault tests that stop or restart a
// server must not use it.
func server(t *testing.T, settings map[string]string) *testenv.PG {
	t.Helper()
	var keys []string
	for k, v := range settings {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	key := strings.Join(keys, ",")
	servers.mu.Lock()
	defer servers.mu.Unlock()
	if pg, ok := servers.byKey[key]; ok {
		return pg
	}
	pg, err := testenv.Start(testenv.Options{Settings: settings})
	if err != nil {
		if errors.Is(err, testenv.ErrNoPostgres) && os.Getenv("TIDEMARK_REQUIRE_PG") != "1" {
			t.Skipf("skipping: %v", err)
		}
		t.Fatalf("start PostgreSQL: %v", err)
	}
	if servers.byKey == nil {
		servers.byKey = map[string]*testenv.PG{}
	}
	servers.byKey[key] = pg
	servers.list = append(servers.list, pg)
	return pg
}

// ---------------------------------------------------------------------------
// One pipeline under test

// env is one source database, its warehouse, and the tidemark sessions run
// against it.
type env struct {
	t       *testing.T
	pg      *testenv.PG
	srcURL  string // direct, for the workload and the oracle
	runURL  string // what tidemark is given (through the proxy, or another role)
	source  string // tidemark's source name (the database name)
	slot    string
	wh      string
	root    string
	proxy   *testenv.Proxy
	bin     string
	args    []string // extra `run` arguments
	envVars []string // extra environment of `run`
	logPath string
	runs    []*session

	ackChecks  int
	violations []string
}

type envOptions struct {
	settings map[string]string // PostgreSQL settings (a server per distinct set)
	proxy    bool              // put a testenv.Proxy between tidemark and PostgreSQL
	preload  int               // rows in fault_rows before the first start
	args     []string
}

const workTable = "fault_rows"

func newEnv(t *testing.T, prefix string, o envOptions) *env {
	t.Helper()
	bin := testenv.Tidemark(t)
	pg := server(t, o.settings)
	e := &env{t: t, pg: pg, bin: bin, args: o.args}
	e.srcURL = pg.CreateDB(t, prefix)
	e.runURL = e.srcURL
	u, _ := url.Parse(e.srcURL)
	e.source = strings.ToLower(strings.TrimPrefix(u.Path, "/"))
	e.slot = "tidemark_" + e.source
	e.root = t.TempDir()
	if keep := os.Getenv("TIDEMARK_FAULTS_KEEP"); keep != "" {
		var err error
		if e.root, err = os.MkdirTemp(keep, prefix+"-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("keeping the warehouse and logs in %s", e.root)
	}
	e.wh = filepath.Join(e.root, "lake")
	e.logPath = filepath.Join(e.root, "tidemark.log")
	if o.proxy {
		p, err := testenv.NewProxy(fmt.Sprintf("%s:%d", pg.Host, pg.Port))
		if err != nil {
			t.Fatal(err)
		}
		e.proxy = p
		pu, _ := url.Parse(e.srcURL)
		pu.Host = p.Addr()
		e.runURL = pu.String()
	}
	pg.Exec(t, e.srcURL, `CREATE TABLE `+workTable+` (pk bigint PRIMARY KEY, version int NOT NULL, payload text)`)
	if o.preload > 0 {
		pg.Exec(t, e.srcURL, fmt.Sprintf(`INSERT INTO `+workTable+` SELECT g, 1, md5(g::text) FROM generate_series(1, %d) g`, o.preload))
	}
	t.Cleanup(e.cleanup)
	return e
}

func (e *env) cleanup() {
	for _, s := range e.runs {
		if !s.exited() {
			_ = s.cmd.Process.Signal(syscall.SIGKILL)
			<-s.done
		}
	}
	if e.proxy != nil {
		e.proxy.Close()
	}
	if !e.t.Failed() {
		return
	}
	data, err := os.ReadFile(e.logPath)
	if err != nil {
		return
	}
	var b strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.HasPrefix(line, "tidemark:") || strings.HasPrefix(line, "=====") || strings.HasPrefix(line, "failpoint") {
			b.WriteString(line + "\n")
		}
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	e.t.Logf("tidemark log %s: warnings and errors:\n%s----- last lines -----\n%s", e.logPath, b.String(), strings.Join(lines, "\n"))
}

// ---------------------------------------------------------------------------
// tidemark sessions

type session struct {
	n      int
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	log    string // the env's log file
	offset int64  // where this session's output starts in it
}

// waitLog waits until the session's output contains substr.
func (s *session) waitLog(t *testing.T, substr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(s.log); err == nil && int64(len(b)) >= s.offset && strings.Contains(string(b[s.offset:]), substr) {
			return
		}
		if s.exited() {
			t.Fatalf("tidemark session %d exited before logging %q: %v", s.n, substr, s.err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("tidemark session %d did not log %q within %s", s.n, substr, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) runArgs() []string {
	return append([]string{"run", "--source", e.runURL, "--warehouse", e.wh,
		"--commit-interval", "200ms", "--heartbeat-interval", "200ms", "--log-level", "debug",
		"--retry-initial-backoff", "100ms", "--retry-max-backoff", "2s"}, e.args...)
}

// start starts `tidemark run` (or, with args, another command) in the
// background, its output appended to the env's log.
func (e *env) start(args ...string) *session {
	e.t.Helper()
	if len(args) == 0 {
		args = e.runArgs()
	}
	f, err := os.OpenFile(e.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	off, _ := f.Seek(0, 2)
	s := &session{n: len(e.runs) + 1, done: make(chan struct{}), log: e.logPath, offset: off}
	fmt.Fprintf(f, "===== tidemark session %d (%s) started %s =====\n", s.n, args[0], time.Now().Format(time.RFC3339Nano))
	s.cmd = exec.Command(e.bin, args...)
	s.cmd.Env = append(os.Environ(), e.envVars...)
	s.cmd.Stdout, s.cmd.Stderr = f, f
	if err := s.cmd.Start(); err != nil {
		e.t.Fatalf("start tidemark: %v", err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	e.runs = append(e.runs, s)
	return s
}

func (s *session) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *session) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// term SIGTERMs the session and returns its exit code (-1: killed by a
// signal, or not stopped within timeout and then killed).
func (s *session) term(timeout time.Duration) int {
	code, _ := s.termStatus(timeout)
	return code
}

// termStatus SIGTERMs the session and returns its exit code and, if a
// signal ended it, that signal (SIGTERM: killed by it, before main
// installed its handler). A session not stopped within timeout gets
// SIGQUIT, whose goroutine dump goes to the log to show where it hung,
// then SIGKILL: code -1, signal SIGQUIT or SIGKILL.
func (s *session) termStatus(timeout time.Duration) (int, syscall.Signal) {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(timeout):
		fmt.Fprintf(os.Stderr, "tidemark session %d did not stop within %s of SIGTERM: SIGQUIT (goroutine dump in %s)\n", s.n, timeout, s.log)
		_ = s.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			s.kill()
		}
		return -1, syscall.SIGKILL
	}
	if ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, ws.Signal()
	}
	return s.cmd.ProcessState.ExitCode(), 0
}

// tidemark runs a tidemark command to completion and returns its combined
// output and exit code.
func (e *env) tidemark(envVars []string, args ...string) (string, int) {
	e.t.Helper()
	cmd := exec.Command(e.bin, args...)
	cmd.Env = append(os.Environ(), envVars...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		e.t.Fatalf("tidemark %s: %v", args[0], err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// ---------------------------------------------------------------------------
// Source and lake state

func (e *env) conn() *pgx.Conn {
	e.t.Helper()
	c, err := pgx.Connect(context.Background(), e.srcURL)
	if err != nil {
		e.t.Fatalf("connect to the source: %v", err)
	}
	return c
}

func (e *env) walLSN() uint64 {
	e.t.Helper()
	c := e.conn()
	defer c.Close(context.Background())
	var s string
	if err := c.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	l, err := postgres.ParseLSN(s)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// slotState returns the slot's confirmed_flush_lsn and whether a walsender
// holds it; ok=false when the slot does not exist.
func (e *env) slotState() (confirmed uint64, active, ok bool) {
	e.t.Helper()
	c := e.conn()
	defer c.Close(context.Background())
	var lsn *string
	var pid *int32
	err := c.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text, active_pid FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&lsn, &pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	if lsn != nil {
		if confirmed, err = postgres.ParseLSN(*lsn); err != nil {
			e.t.Fatal(err)
		}
	}
	return confirmed, pid != nil, true
}

// checkpoint reads the bronze checkpoint of the source.
func (e *env) checkpoint() (pipeline.Checkpoint, bool) {
	e.t.Helper()
	if _, err := os.Stat(filepath.Join(e.wh, "catalog.db")); err != nil {
		return pipeline.Checkpoint{}, false
	}
	cat, err := lake.Open(context.Background(), lake.Config{Warehouse: e.wh})
	if err != nil {
		e.t.Logf("open the lake: %v", err)
		return pipeline.Checkpoint{}, false
	}
	defer cat.Close()
	cp, ok, err := bronze.LoadCheckpoint(context.Background(), cat, e.source)
	if err != nil {
		e.t.Errorf("read the bronze checkpoint: %v", err)
		return cp, false
	}
	return cp, ok
}

func (e *env) snapshotDone() bool {
	cat, err := lake.Open(context.Background(), lake.Config{Warehouse: e.wh})
	if err != nil {
		return false
	}
	defer cat.Close()
	tbl, err := cat.LoadTable(context.Background(), bronze.Ident(e.source, change.TableID{Schema: "public", Name: workTable}))
	if err != nil {
		return false
	}
	var st struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal([]byte(tbl.Summary()[pipeline.PropSnapshot]), &st)
	return st.Status == "done"
}

// checkAck applies the third oracle rule: the position confirmed to
// PostgreSQL is never ahead of the bronze checkpoint. The slot is read
// before the checkpoint, so the check is sound while tidemark runs too (it
// writes the checkpoint before it confirms). After a kill, it first waits
// for the walsender to notice and release the slot.
func (e *env) checkAck(when string, afterKill bool) {
	e.t.Helper()
	if afterKill {
		deadline := time.Now().Add(15 * time.Second)
		for {
			_, active, ok := e.slotState()
			if !ok || !active || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	confirmed, _, ok := e.slotState()
	if !ok {
		return // not created yet
	}
	cp, has := e.checkpoint()
	e.ackChecks++
	if !has {
		return
	}
	if confirmed > postgres.AckedLSN(cp) {
		v := fmt.Sprintf("%s: slot %s confirmed_flush_lsn %s is ahead of the bronze checkpoint's acked LSN %s",
			when, e.slot, postgres.FormatLSN(confirmed), postgres.FormatLSN(postgres.AckedLSN(cp)))
		e.violations = append(e.violations, v)
		e.t.Error(v)
	}
}

// waitCaughtUp waits until s is streaming, the checkpoint reaches target
// and the snapshot of the work table is done.
func (e *env) waitCaughtUp(s *session, target uint64, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	// The lake may already be caught up from an earlier session: wait for
	// this one to be streaming too, so that a SIGTERM that follows reaches
	// a running main (before main, SIGTERM's default action kills).
	s.waitLog(e.t, "capture starting", timeout)
	for {
		if s.exited() {
			e.t.Fatalf("tidemark session %d exited by itself while catching up: %v", s.n, s.err)
		}
		cp, ok := e.checkpoint()
		if ok && postgres.AckedLSN(cp) >= target && e.snapshotDone() {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("tidemark did not catch up to %s within %s (checkpoint %+v, snapshot done %v)",
				postgres.FormatLSN(target), timeout, cp, e.snapshotDone())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitProgress waits until the checkpoint passes the WAL position of now.
func (e *env) waitProgress(s *session, timeout time.Duration) time.Duration {
	e.t.Helper()
	start := time.Now()
	target := e.walLSN()
	deadline := start.Add(timeout)
	for {
		if s.exited() {
			e.t.Fatalf("tidemark session %d exited by itself: %v", s.n, s.err)
		}
		if cp, ok := e.checkpoint(); ok && postgres.AckedLSN(cp) >= target {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			cp, _ := e.checkpoint()
			e.t.Fatalf("no progress past %s within %s (checkpoint %+v)", postgres.FormatLSN(target), timeout, cp)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitSlot waits until the slot exists (the first session created it).
func (e *env) waitSlot(s *session, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if _, _, ok := e.slotState(); ok {
			if _, has := e.checkpoint(); has {
				return
			}
		}
		if s.exited() {
			e.t.Fatalf("tidemark session %d exited by itself before its first checkpoint: %v", s.n, s.err)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no slot and checkpoint within %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// The workload

// workload writes (pk, version, payload) rows on its own connection,
// straight to PostgreSQL (never through the proxy): inserts, updates that
// bump version, deletes, and sometimes a multi-row transaction.
type workload struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	err    error
	ops    atomic.Int64
	maxPK  atomic.Int64
}

func (e *env) startWorkload(seed uint64, firstPK int64) *workload {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &workload{cancel: cancel}
	w.maxPK.Store(firstPK)
	c, err := pgx.Connect(ctx, e.srcURL)
	if err != nil {
		cancel()
		e.t.Fatalf("workload: connect: %v", err)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer c.Close(context.Background())
		for ctx.Err() == nil {
			if err := w.step(ctx, c, rng); err != nil && ctx.Err() == nil {
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && pgErr.Code == "23505" {
					continue
				}
				w.err = err
				return
			}
			w.ops.Add(1)
			time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Microsecond)
		}
	}()
	return w
}

func (w *workload) step(ctx context.Context, c *pgx.Conn, rng *rand.Rand) error {
	existing := func() int64 { return 1 + rng.Int64N(max(1, w.maxPK.Load())) }
	stmt := func() (string, []any) {
		switch x := rng.IntN(100); {
		case x < 40:
			return `INSERT INTO ` + workTable + ` VALUES ($1, 1, $2)`, []any{w.maxPK.Add(1), fmt.Sprintf("p%d", rng.IntN(1e6))}
		case x < 85:
			return `UPDATE ` + workTable + ` SET version = version + 1, payload = $2 WHERE pk = $1`, []any{existing(), fmt.Sprintf("u%d", rng.IntN(1e6))}
		default:
			return `DELETE FROM ` + workTable + ` WHERE pk = $1`, []any{existing()}
		}
	}
	if rng.IntN(10) == 0 {
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background())
		for i := 0; i < 2+rng.IntN(20); i++ {
			q, args := stmt()
			if _, err := tx.Exec(ctx, q, args...); err != nil {
				return err
			}
		}
		return tx.Commit(ctx)
	}
	q, args := stmt()
	_, err := c.Exec(ctx, q, args...)
	return err
}

func (w *workload) stop(t *testing.T) {
	w.cancel()
	w.wg.Wait()
	if w.err != nil {
		t.Fatalf("workload: %v", w.err)
	}
}

// ---------------------------------------------------------------------------
// The oracle

// oracle runs a final session until it has caught up, requires `tidemark
// verify` (which waits for the session's silver) to exit 0, stops the session
// (exit 0 required), then compares the replay of bronze with the source
// and looks for duplicate positions. It returns the rows lost: source keys
// that bronze's replay lacks or holds at another version, plus keys that
// bronze holds and the source does not. The source must be quiet.
func (e *env) oracle() int {
	e.t.Helper()
	s := e.start()
	e.waitCaughtUp(s, e.walLSN(), 3*time.Minute)
	e.checkAck("final session, caught up", false)
	// verify waits until the running session's own silver merger reaches
	// the source position (no separate `tidemark merge`: two silver
	// writers at once are row 4's business, and their race to publish a
	// new silver table fails one of them).
	e.waitSilverPublished(s, 2*time.Minute)
	out, code := e.tidemark(nil, "verify", "--source", e.srcURL, "--warehouse", e.wh, "--name", e.source, "--wait", "2m")
	if code != 0 {
		e.t.Errorf("tidemark verify exited %d:\n%s", code, out)
	} else {
		e.t.Logf("tidemark verify: %s", lastLine(out))
	}
	if code := s.term(time.Minute); code != 0 {
		e.t.Errorf("final session: exit code %d after SIGTERM, want 0", code)
	}
	e.checkAck("after the final clean stop", true)

	rows := bronzetest.Read(e.t, e.wh, bronze.Ident(e.source, change.TableID{Schema: "public", Name: workTable})...)
	if d := bronzetest.Duplicates(rows); len(d) > 0 {
		for i, s := range d {
			if i == 10 {
				break
			}
			e.t.Errorf("duplicate change in bronze: %s", s)
		}
		e.t.Errorf("%d duplicate positions in bronze", len(d))
	}
	got, holes := bronzetest.Fold(rows, []string{"pk"})
	for _, h := range holes {
		e.t.Error(h)
	}
	want := e.sourceRows()
	lost := 0
	for k, w := range want {
		g, ok := got[k]
		if !ok || fmt.Sprint(g["version"]) != w[0] || fmt.Sprint(g["payload"]) != w[1] {
			if lost++; lost <= 10 {
				e.t.Errorf("key %s: source (version %s, payload %s), bronze replay %v", k, w[0], w[1], g)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			if lost++; lost <= 10 {
				e.t.Errorf("key %s is in bronze's replay but not in the source", k)
			}
		}
	}
	e.t.Logf("oracle: %d source rows, %d bronze rows, %d replayed keys, %d lost; %d ack checks, %d violations",
		len(want), len(rows), len(got), lost, e.ackChecks, len(e.violations))
	return lost
}

// waitSilverPublished waits until the session has published the silver
// table of the work table (verify does not wait for that: it reports an
// unpublished table as not verifiable).
func (e *env) waitSilverPublished(s *session, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cat, err := lake.Open(context.Background(), lake.Config{Warehouse: e.wh})
		if err == nil {
			_, err = cat.LoadTable(context.Background(), []string{"silver", e.source, "public", workTable})
			cat.Close()
			if err == nil {
				return
			}
		}
		if s.exited() {
			e.t.Fatalf("tidemark session %d exited before publishing silver: %v", s.n, s.err)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("silver of %s not published within %s: %v", workTable, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (e *env) sourceRows() map[string][2]string {
	e.t.Helper()
	c := e.conn()
	defer c.Close(context.Background())
	rows, err := c.Query(context.Background(), `SELECT pk, version, payload FROM `+workTable)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][2]string{}
	for rows.Next() {
		var pk int64
		var version int32
		var payload *string
		if err := rows.Scan(&pk, &version, &payload); err != nil {
			e.t.Fatal(err)
		}
		p := "<nil>"
		if payload != nil {
			p = *payload
		}
		out[strconv.FormatInt(pk, 10)] = [2]string{strconv.Itoa(int(version)), p}
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// bronzeDuplicates counts duplicate positions in bronze right now (0 if the
// table does not exist yet).
func (e *env) bronzeDuplicates() int {
	e.t.Helper()
	cat, err := lake.Open(context.Background(), lake.Config{Warehouse: e.wh})
	if err != nil {
		return 0
	}
	defer cat.Close()
	tbl, err := cat.LoadTable(context.Background(), bronze.Ident(e.source, change.TableID{Schema: "public", Name: workTable}))
	if err != nil {
		return 0
	}
	rows, err := bronzetest.ReadTable(context.Background(), tbl)
	if err != nil {
		e.t.Errorf("read bronze: %v", err)
		return 0
	}
	d := bronzetest.Duplicates(rows)
	for i, s := range d {
		if i == 5 {
			break
		}
		e.t.Errorf("duplicate change in bronze: %s", s)
	}
	return len(d)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func seed(t *testing.T) uint64 {
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("TIDEMARK_FAULTS_SEED"); v != "" {
		s, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (TIDEMARK_FAULTS_SEED replays it)", s)
	return s
}

// canaryRole creates a login role whose password is a random canary, and
// makes the sessions of e connect as it. SUPERUSER keeps the tests that use
// it about leakage; least privilege is row 31.
func (e *env) canaryRole(t *testing.T, prefix string) (role, canary string) {
	t.Helper()
	canary = fmt.Sprintf("Canary%xPw", rand.Uint64())
	role = prefix + e.source[len(e.source)-6:]
	e.pg.Exec(t, e.srcURL, fmt.Sprintf(`CREATE ROLE %s LOGIN REPLICATION SUPERUSER PASSWORD '%s'`, role, canary))
	t.Cleanup(func() {
		c := e.conn()
		defer c.Close(context.Background())
		c.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
	})
	u, _ := url.Parse(e.srcURL)
	u.User = url.UserPassword(role, canary)
	e.runURL = u.String()
	return role, canary
}
