package control

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Supervisor runs each declared pipeline as a child `tidemark run` process
// with its rendered config, exactly one replica per pipeline across every
// serve on the same state: a serve runs a pipeline only while it holds the
// pipeline's lease (renewed every Poll, fenced by a generation). A serve
// that dies takes its children with it (the kernel's parent-death signal),
// and its leases expire after LeaseTTL, when another serve (or the same
// one restarted) takes them over. A child that exits is started again
// after a backoff; a changed rendered config restarts it at once.
type Supervisor struct {
	Store  *Store
	Holder string
	Log    *slog.Logger
	// Bin is the tidemark binary the children run.
	Bin string
	// RunDir holds <pipeline id>/tidemark.yaml (the rendered config) and
	// run.log (the child's output).
	RunDir   string
	LeaseTTL time.Duration
	Poll     time.Duration
	// RestartInitial doubles after each exit, up to RestartMax; a child
	// that ran for a minute starts again from RestartInitial.
	RestartInitial, RestartMax time.Duration
	// StopTimeout is how long a child has to stop after SIGTERM.
	StopTimeout time.Duration

	mu      sync.Mutex
	workers map[string]*worker
}

// Run supervises until ctx ends, then stops every child and gives up its leases.
func (s *Supervisor) Run(ctx context.Context) {
	s.workers = map[string]*worker{}
	t := time.NewTicker(s.Poll)
	defer t.Stop()
	for {
		if err := s.tick(ctx); err != nil && ctx.Err() == nil {
			s.Log.Warn("supervisor", "error", err)
		}
		select {
		case <-ctx.Done():
			s.stopAll(true)
			return
		case <-t.C:
		}
	}
}

func (s *Supervisor) tick(ctx context.Context) error {
	ps, err := s.Store.allPipelines(ctx)
	if err != nil {
		return err
	}
	declared := map[string]supervised{}
	for _, p := range ps {
		declared[p.ID] = p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Stops run in the background: a child may take --stop-timeout to
	// stop, and the other leases must be renewed meanwhile.
	for id, w := range s.workers {
		p, ok := declared[id]
		select {
		case <-w.done: // stopped itself: its lease was not renewed in time
			delete(s.workers, id)
			continue
		default:
		}
		if !ok {
			s.Log.Info("pipeline removed: stopping it", "pipeline", w.path, "id", id)
			go func() {
				w.stop(true)
				_ = s.Store.dropStatus(context.Background(), id)
			}()
			delete(s.workers, id)
			continue
		}
		renewAt := time.Now()
		held, err := s.Store.RenewLease(ctx, id, s.Holder, w.fence, s.LeaseTTL)
		if err != nil {
			return err
		}
		if !held {
			s.Log.Warn("lease lost: stopping the pipeline", "pipeline", w.path, "fence", w.fence)
			go w.stop(false)
			delete(s.workers, id)
			continue
		}
		w.validUntil.Store(renewAt.Add(s.LeaseTTL).UnixMilli())
		w.setDesired(p)
	}
	for id, p := range declared {
		if _, ok := s.workers[id]; ok {
			continue
		}
		acquireAt := time.Now()
		fence, ok, err := s.Store.AcquireLease(ctx, id, s.Holder, s.LeaseTTL)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		s.Log.Info("lease taken: starting the pipeline", "pipeline", p.Path, "id", id, "fence", fence)
		w := &worker{sup: s, id: id, path: p.Path, fence: fence, want: p, quit: make(chan bool, 1), done: make(chan struct{})}
		w.validUntil.Store(acquireAt.Add(s.LeaseTTL).UnixMilli())
		s.workers[id] = w
		go w.run()
	}
	return nil
}

// stopAll stops every child (release: and gives the leases up).
func (s *Supervisor) stopAll(release bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var wg sync.WaitGroup
	for id, w := range s.workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.stop(release) }()
		delete(s.workers, id)
	}
	wg.Wait()
}

// worker runs one pipeline's child while its serve holds the lease.
type worker struct {
	sup   *Supervisor
	id    string
	path  string
	fence int64

	mu   sync.Mutex
	want supervised
	// validUntil (Unix ms) is when the lease, as last renewed, expires
	// (measured from before the renewal). The worker stops its child on
	// its own a third of a TTL before: a serve that cannot renew (its
	// store unreachable, itself stalled) stops before a successor may
	// start a replica.
	validUntil atomic.Int64

	quit chan bool // true: release the lease after stopping
	done chan struct{}
}

func (w *worker) setDesired(p supervised) {
	w.mu.Lock()
	w.want = p
	w.mu.Unlock()
}

func (w *worker) desired() supervised {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.want
}

func (w *worker) stop(release bool) {
	select {
	case w.quit <- release:
	default:
	}
	<-w.done
}

// status is the worker's view, written to the store every poll.
func (w *worker) put(st Status) {
	st.Holder, st.Fence = w.sup.Holder, w.fence
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.sup.Store.PutStatus(ctx, w.id, st); err != nil {
		w.sup.Log.Warn("write pipeline status", "pipeline", w.path, "error", err)
	}
}

func (w *worker) run() {
	defer close(w.done)
	s := w.sup
	backoff := s.RestartInitial
	st := Status{}
	if prev, err := s.Store.lastStatus(context.Background(), w.id, Layout{}); err == nil && prev != nil {
		st = *prev // restarts, snapshot progress and the last error carry over
	}
	st.State, st.PID = "starting", 0
	doneSet := map[string]bool{}
	for _, t := range st.DoneTables {
		doneSet[t] = true
	}
	recorded := false
	for {
		if time.Now().UnixMilli() > w.validUntil.Load()-s.LeaseTTL.Milliseconds()/3 {
			w.finish(false, st)
			return
		}
		p := w.desired()
		child, err := w.start(p)
		if err != nil {
			st.State, st.LastErrorCode, st.LastError = "backoff", "start_failed", err.Error()
			w.put(st)
		} else {
			st.State, st.Checksum, st.PID, st.Started = "starting", p.Checksum, int64(child.cmd.Process.Pid), time.Now()
			w.put(st)
			prevErrs := map[string]float64{}
			tick := time.NewTicker(s.Poll)
			restartNow := false
		watch:
			for {
				select {
				case release := <-w.quit:
					tick.Stop()
					child.terminate(w.stopTimeout(release))
					w.finish(release, st)
					return
				case <-child.exited:
					break watch
				case <-tick.C:
				}
				if time.Now().UnixMilli() > w.validUntil.Load()-s.LeaseTTL.Milliseconds()/3 {
					s.Log.Warn("lease not renewed in time: stopping the pipeline", "pipeline", w.path, "fence", w.fence)
					tick.Stop()
					child.terminate(w.stopTimeout(false))
					w.finish(false, st)
					return
				}
				if cur := w.desired(); cur.Checksum != p.Checksum {
					s.Log.Info("pipeline config changed: restarting it", "pipeline", w.path, "from", p.Checksum[:12], "to", cur.Checksum[:12])
					child.terminate(s.StopTimeout)
					restartNow = true
					break watch
				}
				m, err := scrape(child.metricsAddr)
				if err != nil {
					continue // not serving yet
				}
				st.LagSeconds, st.LagBytes = m.lagSeconds, m.lagBytes
				seen := map[string]bool{}
				for t, done := range m.tables {
					seen[t] = true
					if done && !doneSet[t] {
						doneSet[t] = true
						st.DoneTables = append(st.DoneTables, t)
					}
				}
				for t := range doneSet {
					seen[t] = true
				}
				st.TablesTotal, st.TablesDone = int64(len(seen)), int64(len(doneSet))
				st.SnapshotDone = st.TablesTotal > 0 && st.TablesDone == st.TablesTotal && st.TablesTotal >= int64(len(p.Spec.Tables))
				for code, n := range m.errors {
					if n > prevErrs[code] {
						st.LastErrorCode, st.LastError = code, "counted by the pipeline's tidemark_errors_total (see its log)"
					}
					prevErrs[code] = n
				}
				switch {
				case st.TablesTotal == 0:
					st.State = "starting" // no table opened yet (or the source is not reachable)
				case !st.SnapshotDone:
					st.State = "snapshotting"
				default:
					st.State = "running"
				}
				if st.SnapshotDone && !recorded {
					n, err := s.Store.RecordEvent(context.Background(), p.pipeline(), EventSnapshotCompleted, SnapshotEventID(p.ID))
					if err != nil {
						s.Log.Warn("record event", "pipeline", w.path, "error", err)
					} else {
						recorded = true
						if n > 0 {
							s.Log.Info("initial snapshot completed: triggers recorded", "pipeline", w.path, "triggers", n)
						}
					}
				}
				w.put(st)
			}
			tick.Stop()
			if restartNow {
				st.State = "restarting"
				w.put(st)
				continue
			}
			ran := time.Since(st.Started)
			st.Restarts++
			st.LastErrorCode, st.LastError = child.lastError()
			st.PID = 0
			if ran > time.Minute {
				backoff = s.RestartInitial
			}
		}
		st.State = "backoff"
		w.put(st)
		s.Log.Warn("pipeline exited: restarting after a backoff", "pipeline", w.path, "code", st.LastErrorCode, "retry_in", backoff)
		select {
		case release := <-w.quit:
			w.finish(release, st)
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, s.RestartMax)
	}
}

// stopTimeout is how long a child has between SIGTERM and SIGKILL: the
// full --stop-timeout when the lease is held to the end (shutdown,
// removal), a sixth of the TTL when it is lost or about to be (a
// successor may start a replica once it expires; kill -9 loses nothing).
func (w *worker) stopTimeout(release bool) time.Duration {
	if release {
		return w.sup.StopTimeout
	}
	return min(w.sup.StopTimeout, w.sup.LeaseTTL/6)
}

func (w *worker) finish(release bool, st Status) {
	st.State, st.PID = "stopped", 0
	w.put(st)
	if release {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.sup.Store.ReleaseLease(ctx, w.id, w.sup.Holder, w.fence)
	}
}

// child is one running `tidemark run`.
type child struct {
	cmd         *exec.Cmd
	exited      chan struct{}
	err         error
	metricsAddr string
	logPath     string
}

func (w *worker) start(p supervised) (*child, error) {
	s := w.sup
	dir := filepath.Join(s.RunDir, p.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "tidemark.yaml")
	if err := os.WriteFile(cfg, p.Rendered, 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &child{exited: make(chan struct{}), metricsAddr: "127.0.0.1:" + strconv.Itoa(port), logPath: filepath.Join(dir, "run.log")}
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "===== tidemark serve %s starts %s (fence %d, config %s) %s =====\n", s.Holder, p.Path, w.fence, p.Checksum[:12], time.Now().UTC().Format(time.RFC3339))
	c.cmd = exec.Command(s.Bin, "run", "--config", cfg, "--metrics-addr", c.metricsAddr)
	c.cmd.Dir = dir
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.Env = append(os.Environ(), "TIDEMARK_PIPELINE_ID="+p.ID, "TIDEMARK_PIPELINE_FENCE="+strconv.FormatInt(w.fence, 10))
	// The child dies with its serve: a SIGKILLed serve leaves no replica
	// running beside the one its successor starts.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() {
		c.err = c.cmd.Wait()
		logf.Close()
		close(c.exited)
	}()
	return c, nil
}

func (c *child) terminate(timeout time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

var lastErrRE = regexp.MustCompile(`^tidemark: \[([a-z0-9_]+)\] (.*)$`)

// lastError reads the code and message of the child's last `tidemark:`
// line (its exit message; already redacted by the child).
func (c *child) lastError() (code, msg string) {
	code = "exited"
	if c.err != nil {
		msg = c.err.Error()
	}
	f, err := os.Open(c.logPath)
	if err != nil {
		return code, msg
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 1<<16 {
		_, _ = f.Seek(st.Size()-1<<16, io.SeekStart)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	found := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "=====") {
			found, code, msg = false, "exited", ""
			if c.err != nil {
				msg = c.err.Error()
			}
			continue
		}
		if m := lastErrRE.FindStringSubmatch(line); m != nil && !found {
			code, msg, found = m[1], m[2], true
		} else if strings.HasPrefix(line, "tidemark: ") && !found {
			msg = strings.TrimPrefix(line, "tidemark: ")
		}
	}
	return code, msg
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// childMetrics is what the supervisor reads from a child's /metrics.
type childMetrics struct {
	lagSeconds float64
	lagBytes   int64
	tables     map[string]bool    // tidemark_snapshot_done by table
	errors     map[string]float64 // tidemark_errors_total by code
}

var (
	sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)`)
	labelRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

var scrapeClient = &http.Client{Timeout: 5 * time.Second}

// scrape reads the child's Prometheus text exposition.
func scrape(addr string) (childMetrics, error) {
	m := childMetrics{tables: map[string]bool{}, errors: map[string]float64{}}
	resp, err := scrapeClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return m, errors.New(resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		s := sampleRE.FindStringSubmatch(line)
		if s == nil {
			continue
		}
		v, err := strconv.ParseFloat(s[3], 64)
		if err != nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelRE.FindAllStringSubmatch(s[2], -1) {
			labels[l[1]] = l[2]
		}
		switch s[1] {
		case "tidemark_capture_lag_seconds":
			m.lagSeconds = v
		case "tidemark_capture_lag_bytes":
			m.lagBytes = int64(v)
		case "tidemark_snapshot_done":
			m.tables[labels["source"]+"."+labels["table"]] = m.tables[labels["source"]+"."+labels["table"]] || v == 1
		case "tidemark_errors_total":
			if c := labels["code"]; c != "" && c != "transient" {
				m.errors[c] += v
			}
		}
	}
	return m, sc.Err()
}
