package bench

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"github.com/uptrace/bun/driver/sqliteshim"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
)

// Launcher says how to start one tidemark pipeline: Path with Args, then
// the `tidemark run` flags (--source, --warehouse, ...). The default is the
// real binary: {Path: "bin/tidemark", Args: ["run"]}.
type Launcher struct {
	Path string
	Args []string
	Env  []string // added to this process's environment
	// ProfileDir, if set, makes every pipeline write a CPU profile and a
	// heap profile there (<run name>.pprof, <run name>.heap.pprof). Only a
	// launcher that runs PipelineMain understands the flags this adds.
	ProfileDir string
}

// pipeline is one running tidemark process.
type pipeline struct {
	name    string
	wh      string // warehouse directory
	cmd     *exec.Cmd
	metrics string // /metrics URL
	logPath string
	start   time.Time
	exited  chan struct{}
	waitErr error
}

// pipelineMetrics are the figures the harness reads from /metrics.
type pipelineMetrics struct {
	rows      int64  // tidemark_bronze_rows_committed_total, summed over tables
	confirmed uint64 // tidemark_capture_confirmed_lsn
	errors    int64  // tidemark_capture_errors_total, all classes
}

// startPipeline starts tidemark for database db with its own name (slot,
// publication and bronze namespace), a warehouse under the work directory,
// and a metrics port; extra are more run flags.
func (b *bench) startPipeline(ctx context.Context, name, db string, extra ...string) (*pipeline, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	wh := filepath.Join(b.opts.WorkDir, "lake", name)
	logPath := filepath.Join(b.opts.WorkDir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := append([]string(nil), b.opts.Launcher.Args...)
	if d := b.opts.Launcher.ProfileDir; d != "" {
		args = append(args, "--cpuprofile", filepath.Join(d, name+".pprof"), "--memprofile", filepath.Join(d, name+".heap.pprof"))
	}
	args = append(args, "--source", b.sourceURL(db), "--name", name, "--warehouse", wh,
		"--metrics-addr", addr, "--log-level", "info")
	args = append(args, extra...)
	args = append(args, b.opts.PipelineArgs...)
	cmd := exec.Command(b.opts.Launcher.Path, args...)
	cmd.Env = append(os.Environ(), b.opts.Launcher.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	p := &pipeline{name: name, wh: wh, cmd: cmd, metrics: "http://" + addr + "/metrics", logPath: logPath, exited: make(chan struct{})}
	p.start = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start tidemark %s (%s): %w", name, b.opts.Launcher.Path, err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// sourceURL is tidemark's --source for database db of the run's server.
func (b *bench) sourceURL(db string) string {
	if b.my != nil {
		return b.my.m.URL(db)
	}
	return b.srv.url(db)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port for metrics: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// pollInterval is how often /metrics is read while waiting: it bounds the
// error of a measured time (a scrape costs well under a millisecond).
const pollInterval = 20 * time.Millisecond

// waitFor polls the pipeline's metrics until cond holds and returns the
// time since the process started. It fails if the process exits, reports a
// session error, or timeout passes.
func (p *pipeline) waitFor(ctx context.Context, timeout time.Duration, what string, cond func(pipelineMetrics) bool) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	var last pipelineMetrics
	for {
		m, err := scrape(ctx, client, p.metrics)
		if err == nil {
			last = m
			if cond(m) {
				return time.Since(p.start), nil
			}
			if m.errors > 0 {
				return 0, fmt.Errorf("tidemark %s: a capture session failed while waiting for %s (see %s):\n%s", p.name, what, p.logPath, p.logTail())
			}
		}
		select {
		case <-p.exited:
			return 0, fmt.Errorf("tidemark %s exited (%v) while waiting for %s:\n%s", p.name, p.waitErr, what, p.logTail())
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(pollInterval):
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("tidemark %s: %s not reached within %s (rows committed %d, confirmed LSN %d; log %s)",
				p.name, what, timeout, last.rows, last.confirmed, p.logPath)
		}
	}
}

// waitTable polls the pipeline's catalog until table ns.name exists (a
// silver table appears once it is complete) and returns the time since the
// process started. The catalog is SQLite in WAL mode: reading it does not
// block the pipeline's commits.
func (p *pipeline) waitTable(ctx context.Context, timeout time.Duration, ns []string, name string) (time.Duration, error) {
	db, err := sql.Open(sqliteshim.ShimName, "file:"+filepath.Join(p.wh, "catalog.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return 0, fmt.Errorf("open the catalog of tidemark %s: %w", p.name, err)
	}
	defer db.Close()
	what := strings.Join(ns, ".") + "." + name
	deadline := time.Now().Add(timeout)
	for {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM iceberg_tables WHERE table_namespace = ? AND table_name = ?`,
			strings.Join(ns, "."), name).Scan(&n)
		if err == nil && n > 0 {
			return time.Since(p.start), nil
		}
		select {
		case <-p.exited:
			return 0, fmt.Errorf("tidemark %s exited (%v) while waiting for %s:\n%s", p.name, p.waitErr, what, p.logTail())
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("tidemark %s: %s did not appear within %s (last error: %v; log %s)", p.name, what, timeout, err, p.logPath)
		}
	}
}

func scrape(ctx context.Context, client *http.Client, url string) (pipelineMetrics, error) {
	var m pipelineMetrics
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return m, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		i := strings.LastIndexByte(rest, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(rest[i+1:], 64)
		if err != nil {
			continue
		}
		switch name {
		case "tidemark_bronze_rows_committed_total": // one series per table
			m.rows += int64(v)
		case "tidemark_capture_confirmed_lsn":
			m.confirmed = uint64(v) // exact below 2^53 bytes of WAL
		case "tidemark_capture_errors_total":
			m.errors += int64(v)
		}
	}
	return m, sc.Err()
}

// peakRSS is the process's peak resident set size (VmHWM) in bytes.
func (p *pipeline) peakRSS() (int64, error) {
	peak, err := peakRSSOf(p.cmd.Process.Pid)
	if err != nil {
		return 0, fmt.Errorf("tidemark %s: %w", p.name, err)
	}
	return peak, nil
}

// peakRSSOf is process pid's peak resident set size (VmHWM) in bytes. Not
// the rusage of a finished child: Linux carries the parent's peak at fork
// into it across exec.
func peakRSSOf(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read peak RSS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse VmHWM %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// cpuTime is the CPU time (user + system) the process has used so far. It
// is a steadier figure than wall time on a shared machine: other processes
// slow tidemark down but do not make it do more work.
func (p *pipeline) cpuTime() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time of tidemark %s: %w", p.name, err)
	}
	// Fields after the command name (which may hold spaces) in ")": state is
	// field 3, utime and stime are fields 14 and 15, in clock ticks (100/s on
	// Linux).
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b)[i+1:])
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat of tidemark %s", p.cmd.Process.Pid, p.name)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat of tidemark %s", p.cmd.Process.Pid, p.name)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// stop asks the pipeline to stop (SIGTERM: flush, confirm, exit 0) and
// waits for it; after a minute it is killed and that is an error.
// finish reads p's peak RSS, stops it (SIGTERM) and drops its slot name
// (tidemark_<name>) in database db: the end of a measured pipeline.
func (b *bench) finish(ctx context.Context, p *pipeline, db, name string) (peak int64, err error) {
	if peak, err = p.peakRSS(); err != nil {
		p.stop()
		return 0, err
	}
	if err := p.stop(); err != nil {
		return 0, err
	}
	return peak, b.srv.dropSlot(ctx, db, "tidemark_"+name)
}

func (p *pipeline) stop() error {
	select {
	case <-p.exited:
		return p.exitError()
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.exitError()
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("tidemark %s did not stop within a minute of SIGTERM (killed); log %s", p.name, p.logPath)
	}
}

func (p *pipeline) exitError() error {
	if p.waitErr != nil {
		return fmt.Errorf("tidemark %s: %w\n%s", p.name, p.waitErr, p.logTail())
	}
	return nil
}

func (p *pipeline) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	return tail(string(b), 3000)
}

// peakHeapProfile writes the in-use heap profile to path every time the
// process's peak RSS (VmHWM) grows 2% past the last written (sampled every
// 100 ms), so that path ends holding what was live near the peak RSS: the
// allocation profile written at exit tells where bytes were allocated, not
// which were held at the peak. (Sampling the heap's objects instead
// caught a later, smaller heap peak than the RSS one: the silver build's
// spill copy of a huge value was missed.)
func peakHeapProfile(path string, stderr io.Writer) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var peak int64
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			v, err := peakRSSOf(os.Getpid())
			if err == nil && v > peak+peak/50 {
				peak = v
				f, err := os.Create(path)
				if err != nil {
					fmt.Fprintln(stderr, "tidemark: peak heap profile: "+err.Error())
					return
				}
				if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
					fmt.Fprintln(stderr, "tidemark: peak heap profile: "+err.Error())
				}
				f.Close()
			}
		}
	}()
	return func() { close(done); <-finished }
}

// PipelineMain is `tidemark run` with two more flags, --cpuprofile FILE and
// --memprofile FILE: it
// parses the same flags, runs the pipeline until SIGTERM or SIGINT and
// returns tidemark's exit code. The bench command re-executes itself into
// it to profile a pipeline; tests use it to start a pipeline process
// without building the binary.
func PipelineMain(args []string, stderr io.Writer) int {
	fs := pflag.NewFlagSet("pipeline", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	holder := &config.Config{}
	holder.BindFlags(fs)
	cfgPath := fs.String("config", "", "YAML configuration file (flags override it)")
	profile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile (allocations of the whole run, and what is live at the end) to this file on exit")
	if err := fs.Parse(args); err != nil {
		return fault.ExitConfig
	}
	cfg, err := config.Resolve(fs, *cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "tidemark: "+config.RedactURL(err.Error()))
		return fault.ExitConfig
	}
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintln(stderr, "tidemark: cpu profile: "+err.Error())
			return fault.ExitConfig
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "tidemark: cpu profile: "+err.Error())
			return fault.ExitConfig
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		stopPeak := peakHeapProfile(strings.TrimSuffix(*memProfile, ".heap.pprof")+".peak.heap.pprof", stderr)
		defer stopPeak()
		defer func() {
			f, err := os.Create(*memProfile)
			if err != nil {
				fmt.Fprintln(stderr, "tidemark: heap profile: "+err.Error())
				return
			}
			defer f.Close()
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fmt.Fprintln(stderr, "tidemark: heap profile: "+err.Error())
			}
		}()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, cfg, app.NewLogger(cfg)); err != nil {
		var ce *config.Error
		fmt.Fprintln(stderr, "tidemark: "+config.RedactURL(err.Error()))
		if errors.As(err, &ce) {
			return fault.ExitConfig
		}
		return fault.ExitCode(err)
	}
	return fault.ExitOK
}
