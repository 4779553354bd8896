//go:build faults

package faults_test

// The faults of RELIABILITY.md that need no change to the product. Each
// TestQuick* runs in the CI subset (`-run Quick`); TestFull* are the long
// versions that `make faults` adds.

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/source/postgres"
)

// ---------------------------------------------------------------------------
// Row 1: process crash, kill -9 at random moments in snapshot and streaming

func TestQuickCrashLoop(t *testing.T) { crashLoop(t, 3, 20000) }
func TestFullCrashLoop(t *testing.T)  { crashLoop(t, fullIterations(), 20000) }

func crashLoop(t *testing.T, iterations, preload int) {
	injections, lost, note := 0, -1, ""
	record(t, "1 process crash (kill -9 loop)", &injections, &lost, &note)
	rng := rand.New(rand.NewPCG(seed(t), 1))
	e := newEnv(t, "crash", envOptions{preload: preload, args: []string{"--snapshot-chunk-rows", "500"}})

	// The first session pauses 50 ms between snapshot chunks (failpoint
	// snapshot-between-chunks), so that its snapshot of 40 chunks lasts
	// at least 2 s and the first kill, within 300 ms, lands inside it.
	e.envVars = []string{"TIDEMARK_FAILPOINTS=snapshot-between-chunks=sleep(50)"}
	first := e.start()
	e.envVars = nil
	e.waitSlot(first, time.Minute)
	wl := e.startWorkload(rng.Uint64(), int64(preload))
	passed, midSnapshot := 0, 0
	for i := 0; i < iterations; i++ {
		s := first
		if i > 0 {
			s = e.start()
		}
		d := time.Duration(300+rng.IntN(2200)) * time.Millisecond
		if i == 0 {
			d = time.Duration(rng.IntN(300)) * time.Millisecond // inside the snapshot
		}
		time.Sleep(d)
		if s.exited() {
			t.Errorf("iteration %d: tidemark exited by itself before the kill: %v", i+1, s.err)
			continue
		}
		inSnapshot := !e.snapshotDone()
		if inSnapshot {
			midSnapshot++
		}
		s.kill()
		injections++
		before := len(e.violations)
		e.checkAck(fmt.Sprintf("kill %d", i+1), true)
		dups := e.bronzeDuplicates()
		if len(e.violations) == before && dups == 0 {
			passed++
		}
		t.Logf("kill %d after %s (snapshot running: %v, workload ops %d)", i+1, d.Round(time.Millisecond), inSnapshot, wl.ops.Load())
		if rng.IntN(3) == 0 { // an outage is a delay
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
		}
	}
	wl.stop(t)
	lost = e.oracle()
	note = fmt.Sprintf("%d/%d iterations passed, %d kills during the snapshot", passed, iterations, midSnapshot)
	if passed != iterations {
		t.Errorf("crash loop: %d of %d iterations passed", passed, iterations)
	}
	if midSnapshot == 0 {
		t.Errorf("crash loop: no kill landed inside the snapshot")
	}
}

// ---------------------------------------------------------------------------
// Row 5: the walsender is terminated, repeatedly

func TestQuickWalsenderKilled(t *testing.T) { walsenderKilled(t, 3) }
func TestFullWalsenderKilled(t *testing.T)  { walsenderKilled(t, 15) }

func walsenderKilled(t *testing.T, times int) {
	injections, lost, note := 0, -1, ""
	record(t, "5 walsender killed", &injections, &lost, &note)
	e := newEnv(t, "walsender", envOptions{preload: 1000})
	s := e.start()
	e.waitSlot(s, time.Minute)
	wl := e.startWorkload(seed(t), 1000)
	var longest time.Duration
	for i := 0; i < times; i++ {
		time.Sleep(700 * time.Millisecond)
		c := e.conn()
		var n int
		err := c.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slot).Scan(&n)
		c.Close(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Logf("termination %d: no walsender held the slot (reconnecting)", i+1)
			continue
		}
		injections++
		e.checkAck(fmt.Sprintf("walsender termination %d", i+1), false)
		// It must reconnect and move on from the confirmed position.
		longest = max(longest, e.waitProgress(s, time.Minute))
	}
	wl.stop(t)
	if s.exited() {
		t.Fatalf("tidemark exited after walsender terminations: %v", s.err)
	}
	if code := s.term(time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	lost = e.oracle()
	note = fmt.Sprintf("reconnected each time; slowest recovery %s", longest.Round(100*time.Millisecond))
}

// ---------------------------------------------------------------------------
// Row 6: network cut, stall past wal_sender_timeout, slow link (TCP proxy)

var shortSenderTimeout = map[string]string{"wal_sender_timeout": "2s"}

func TestQuickProxyReset(t *testing.T) { network(t, 2, false) }
func TestFullNetwork(t *testing.T)     { network(t, 5, true) }

func network(t *testing.T, resets int, stallAndThrottle bool) {
	injections, lost, note := 0, -1, ""
	record(t, "6 network cut/stall/slow link (proxy)", &injections, &lost, &note)
	e := newEnv(t, "network", envOptions{preload: 2000, proxy: true, settings: shortSenderTimeout})
	s := e.start()
	e.waitSlot(s, time.Minute)
	wl := e.startWorkload(seed(t), 2000)
	var notes []string
	for i := 0; i < resets; i++ {
		time.Sleep(time.Second)
		n := e.proxy.ResetAll()
		injections++
		e.checkAck(fmt.Sprintf("proxy reset %d", i+1), false)
		d := e.waitProgress(s, time.Minute)
		t.Logf("reset %d: %d connections cut; progress again after %s", i+1, n, d.Round(10*time.Millisecond))
	}
	notes = append(notes, fmt.Sprintf("%d resets", resets))
	if stallAndThrottle {
		// A stall longer than wal_sender_timeout (2s): the server gives up
		// on the silent walsender; tidemark must notice and reconnect.
		e.proxy.Stall(5 * time.Second)
		injections++
		time.Sleep(5 * time.Second)
		e.checkAck("after a 5s stall", false)
		d := e.waitProgress(s, time.Minute)
		notes = append(notes, fmt.Sprintf("5s stall: recovered in %s", d.Round(100*time.Millisecond)))

		e.proxy.Throttle(32 << 10)
		injections++
		time.Sleep(5 * time.Second)
		e.checkAck("throttled to 32 KiB/s", false)
		e.proxy.Throttle(0)
		d = e.waitProgress(s, time.Minute)
		notes = append(notes, fmt.Sprintf("5s at 32 KiB/s: caught up in %s", d.Round(100*time.Millisecond)))
	}
	wl.stop(t)
	if s.exited() {
		t.Fatalf("tidemark exited under network faults: %v", s.err)
	}
	if code := s.term(time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	lost = e.oracle()
	note = strings.Join(notes, "; ")
}

// ---------------------------------------------------------------------------
// Row 27: SIGTERM between the slot's creation and its checkpoint, right
// after the first checkpoint, before main, right after start and mid-run:
// exit 0 (or, before main, death by the signal), final position flushed,
// no duplicate on restart

func TestQuickSigterm(t *testing.T) { sigterm(t, 2) }
func TestFullSigterm(t *testing.T)  { sigterm(t, 10) }

func sigterm(t *testing.T, midRun int) {
	injections, lost, note := 0, -1, ""
	record(t, "27 SIGTERM", &injections, &lost, &note)
	rng := rand.New(rand.NewPCG(seed(t), 27))
	e := newEnv(t, "sigterm", envOptions{preload: 3000, args: []string{"--snapshot-chunk-rows", "500"}})

	// The first start, between creating the slot and recording it in its
	// first checkpoint: the session pauses there (failpoint
	// bronze-before-checkpoint, whose first hit is the slot's checkpoint)
	// and the SIGTERM lands in the pause. A clean stop; the slot it
	// created is kept, and the next start adopts it.
	e.envVars = []string{"TIDEMARK_FAILPOINTS=bronze-before-checkpoint=1*sleep(5000)"}
	s := e.start()
	e.envVars = nil
	s.waitLog(t, "created replication slot", time.Minute)
	injections++
	if code := s.term(time.Minute); code != 0 {
		t.Errorf("SIGTERM between creating the slot and its first checkpoint: exit code %d, want 0", code)
	}
	if _, _, ok := e.slotState(); !ok {
		t.Errorf("the slot is gone after a SIGTERM right after its creation")
	}
	e.checkAck("SIGTERM between creating the slot and its first checkpoint", true)

	// Right after a first checkpoint (this one adopts the slot), paused
	// there (failpoint bronze-after-checkpoint): a clean stop.
	e.envVars = []string{"TIDEMARK_FAILPOINTS=bronze-after-checkpoint=1*sleep(5000)"}
	s = e.start()
	e.envVars = nil
	e.waitSlot(s, time.Minute)
	injections++
	if code := s.term(time.Minute); code != 0 {
		t.Errorf("SIGTERM right after the first checkpoint: exit code %d, want 0", code)
	}
	e.checkAck("SIGTERM right after the first checkpoint", true)

	// 100 ms after exec: usually still in Go's package initialisation
	// (a quarter of a second here, most of it iceberg-go's), before main
	// installs its signal handler, where SIGTERM's default action kills
	// the process before it can move anything; on a fast machine main may
	// be running, and it is a clean stop. Either is right; which one is
	// reported, anything else fails.
	confirmedBefore, _, _ := e.slotState()
	cpBefore, _ := e.checkpoint()
	s = e.start()
	time.Sleep(100 * time.Millisecond)
	injections++
	switch code, sig := s.termStatus(time.Minute); {
	case sig == syscall.SIGTERM:
		note = "SIGTERM 100ms after exec: killed by the signal before main ran; "
		confirmed, _, _ := e.slotState()
		if cp, _ := e.checkpoint(); confirmed != confirmedBefore || postgres.AckedLSN(cp) != postgres.AckedLSN(cpBefore) {
			t.Errorf("killed by SIGTERM before main, yet the slot (%s -> %s) or the checkpoint (%s -> %s) moved",
				postgres.FormatLSN(confirmedBefore), postgres.FormatLSN(confirmed), postgres.FormatLSN(postgres.AckedLSN(cpBefore)), postgres.FormatLSN(postgres.AckedLSN(cp)))
		}
	case code == 0:
		note = "SIGTERM 100ms after exec: main was running, a clean stop; "
		e.checkAck("SIGTERM 100ms after exec", true)
	default:
		t.Errorf("SIGTERM 100ms after exec: exit code %d (signal %v), want 0, or death by SIGTERM before main", code, sig)
	}

	// Right after start: main is running, capture not yet started.
	s = e.start()
	s.waitLog(t, "tidemark starting", time.Minute)
	injections++
	if code := s.term(time.Minute); code != 0 {
		t.Errorf("SIGTERM right after start: exit code %d, want 0", code)
	}
	e.checkAck("SIGTERM right after start", true)

	wl := e.startWorkload(rng.Uint64(), 3000)
	behind := 0
	for i := 0; i < midRun; i++ {
		s = e.start()
		// Mid-run: after main has installed its signal handler (a loaded
		// machine can take over a second to get there; before it, SIGTERM
		// kills, which the first injection above already covers).
		s.waitLog(t, "tidemark starting", time.Minute)
		time.Sleep(time.Duration(500+rng.IntN(2000)) * time.Millisecond)
		if s.exited() {
			t.Fatalf("session %d exited by itself: %v", s.n, s.err)
		}
		injections++
		if code := s.term(time.Minute); code != 0 {
			t.Errorf("SIGTERM mid-run %d: exit code %d, want 0", i+1, code)
		}
		e.checkAck(fmt.Sprintf("SIGTERM mid-run %d", i+1), true)
		// A clean stop confirms what it committed: slot == checkpoint.
		confirmed, _, _ := e.slotState()
		if cp, ok := e.checkpoint(); ok && confirmed < postgres.AckedLSN(cp) {
			behind++
			t.Logf("after clean stop %d: slot confirmed %s < checkpoint %s (final confirmation not seen by the server)",
				i+1, postgres.FormatLSN(confirmed), postgres.FormatLSN(postgres.AckedLSN(cp)))
		}
		if d := e.bronzeDuplicates(); d > 0 {
			t.Errorf("after clean stop %d: %d duplicate positions in bronze", i+1, d)
		}
	}
	wl.stop(t)
	lost = e.oracle()
	note += fmt.Sprintf("slot behind checkpoint after %d of %d clean stops", behind, midRun)
}

// ---------------------------------------------------------------------------
// Row 29: a canary password appears in no log, output, metric or table

func TestQuickCanary(t *testing.T) {
	injections, lost, note := 0, -1, ""
	record(t, "29 secret leakage (canary password)", &injections, &lost, &note)
	e := newEnv(t, "canary", envOptions{preload: 500})
	role, canary := e.canaryRole(t, "tm_canary_")
	u, _ := url.Parse(e.runURL)
	host := fmt.Sprintf("%s:%d", e.pg.Host, e.pg.Port)
	db := strings.TrimPrefix(u.Path, "/")

	var outputs []string
	check := func(what, out string) {
		t.Helper()
		outputs = append(outputs, out)
		if strings.Contains(out, canary) {
			t.Errorf("%s: the canary password appears in the output:\n%s", what, out)
		}
	}
	// Malformed connection strings and rejected credentials.
	for _, bad := range []string{
		"postgres://" + role + ":" + canary + "@" + e.pg.Host + ":notaport/" + db,
		"postgres://" + role + ":" + canary + "@[" + host + "/" + db,
		"host=" + e.pg.Host + " port=notaport user=" + role + " password=" + canary + " dbname=" + db,
		"host=" + e.pg.Host + " port=" + fmt.Sprint(e.pg.Port) + " user=" + role + " password='" + canary + " dbname=" + db,
		"postgres://nosuchuser:" + canary + "@" + host + "/" + db + "?sslmode=disable",
	} {
		injections++
		out, code := e.tidemark(nil, "run", "--source", bad, "--warehouse", filepath.Join(e.root, "badlake"), "--log-level", "debug", "--retry-max-elapsed", "2s")
		if code != 2 {
			t.Errorf("run with a bad source: exit %d, want 2:\n%s", code, out)
		}
		check("run --source <bad>", out)
	}
	// A real run at DEBUG with metrics, then status, show, verify.
	port := freePort(t)
	e.args = append(e.args, "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port))
	s := e.start()
	e.waitSlot(s, time.Minute)
	wl := e.startWorkload(rand.Uint64(), 500)
	time.Sleep(2 * time.Second)
	wl.stop(t)
	e.waitCaughtUp(s, e.walLSN(), time.Minute)
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Errorf("scrape /metrics: %v", err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		injections++
		check("/metrics", string(b))
	}
	// Published before anything reads silver; `tidemark merge` runs once
	// the session has stopped (two silver writers racing to publish is
	// row 4's business).
	e.waitSilverPublished(s, 2*time.Minute)
	for _, args := range [][]string{
		{"status", "--warehouse", e.wh, "--source", e.runURL},
		{"status", "--warehouse", e.wh, "--source", e.runURL, "--format", "json"},
		{"show", "--warehouse", e.wh, "bronze." + e.source + ".public." + workTable, "--limit", "5"},
		{"verify", "--source", e.runURL, "--warehouse", e.wh, "--name", e.source, "--wait", "1m", "--log-level", "debug"},
		{"merge", "--warehouse", e.wh, "--name", e.source},
	} {
		if args[0] == "merge" {
			if code := s.term(time.Minute); code != 0 {
				t.Errorf("exit code %d after SIGTERM, want 0", code)
			}
		}
		injections++
		out, code := e.tidemark(nil, args...)
		if code != 0 {
			t.Errorf("tidemark %s exited %d:\n%s", args[0], code, out)
		}
		check("tidemark "+args[0], out)
	}
	log, _ := os.ReadFile(e.logPath)
	if !strings.Contains(string(log), "level=DEBUG") {
		t.Errorf("the run log has no DEBUG lines: the test did not log at debug")
	}
	check("the run log (debug)", string(log))
	// Tables, metadata, catalog, spool: every byte under the warehouse.
	files := 0
	filepath.WalkDir(e.wh, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		files++
		if strings.Contains(string(b), canary) {
			t.Errorf("the canary password is in %s", p)
		}
		return nil
	})
	e.runURL = e.srcURL
	lost = e.oracle()
	note = fmt.Sprintf("%d outputs and %d warehouse files clean", len(outputs), files)
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ---------------------------------------------------------------------------
// Rows 2 and 3, and a crash inside a merge: failpoints stop the process
// (exit 137, like kill -9) at exact points of the commit protocol, under a
// running workload; every restart must lose and duplicate nothing.

func TestQuickFailpoints(t *testing.T) { failpoints(t, 1) }
func TestFullFailpoints(t *testing.T)  { failpoints(t, 3) }

func failpoints(t *testing.T, rounds int) {
	injections, lost, note := 0, -1, ""
	record(t, "2/3 crash at exact commit points (failpoints)", &injections, &lost, &note)
	e := newEnv(t, "failpoints", envOptions{preload: 2000})
	wl := e.startWorkload(seed(t), 2000)
	points := []string{
		"lake-append-before-commit", // row 2: data files written, not committed
		"lake-append-after-commit",  // row 3: committed, outcome unknown to the writer
		"bronze-before-checkpoint",
		"bronze-after-checkpoint",
		"stream-before-status",
		"lake-merge-before-commit", // inside a silver merge
		"lake-merge-after-commit",
	}
	fired := map[string]int{}
	for r := 0; r < rounds; r++ {
		for _, fp := range points {
			e.envVars = []string{"TIDEMARK_FAILPOINTS=" + fp + "=" + fmt.Sprint(2+r) + "*exit"}
			s := e.start()
			select {
			case <-s.done:
				if code := s.cmd.ProcessState.ExitCode(); code == 137 {
					fired[fp]++
					injections++
				} else {
					t.Errorf("failpoint %s: tidemark exited %d, want 137 (the failpoint)", fp, code)
				}
			case <-time.After(90 * time.Second):
				t.Logf("failpoint %s did not fire within 90s; killing", fp)
				s.kill()
			}
			e.checkAck("after failpoint "+fp, true)
		}
	}
	e.envVars = nil
	wl.stop(t)
	lost = e.oracle()
	note = fmt.Sprintf("fired: %v", fired)
}
