package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/config"
)

// Options size and select a run. The zero value of a size means its
// default (DefaultOptions); docs/benchmarks.md gives the sizes of the
// published run.
type Options struct {
	Launcher Launcher
	// WorkDir holds the lakes, the logs and workload files; removed at the
	// end unless Keep.
	WorkDir string
	Keep    bool
	// PipelineArgs are added to every pipeline's run flags (after the
	// harness's own, so they win): settings experiments such as
	// --snapshot-chunk-rows 50000, or --log-level debug.
	PipelineArgs []string
	// Source is the database measured: "postgres" (the default) or
	// "mysql" (a throwaway MariaDB; scenarios 1 and 2 only, see mysql.go).
	Source string
	// Scenarios to run ("1".."7"); empty: all.
	Scenarios []string
	// Reps is how often each measurement is repeated (median reported).
	Reps int

	// Scenario 1: changes generated per workload (pgbench TPC-B: 4 per
	// transaction; wide rows: 2 per transaction), by Clients pgbench clients.
	CDCChanges     int
	CDCWideChanges int
	CDCClients     int
	// Scenario 2: pgbench scale of the snapshot (100,000 pgbench_accounts
	// rows per unit) and rows of the wide table.
	SnapshotScale int
	SnapshotWide  int
	// Scenario 3 (and 6): steady insert rate (rows/s) in transactions of
	// LatencyBatch rows, for LatencyDuration.
	LatencyRate     int
	LatencyBatch    int
	LatencyDuration time.Duration
	// Scenario 4: silver merge of MergeKeys changed keys into a table of
	// MergeRows rows and one of MergeFactor × MergeRows rows.
	MergeRows   int
	MergeFactor int
	MergeKeys   int
	// Scenario 5: BigRows values of BigValueBytes each, in one transaction.
	BigRows       int
	BigValueBytes int
	// Scenario 7: the size of the one huge value (200 MiB; PostgreSQL's
	// limit is 1 GiB).
	HugeValueBytes int
	// Scenario 8: a silver backlog of BacklogChanges changes in
	// BacklogCommits bronze commits, against the same in one commit.
	BacklogChanges int
	BacklogCommits int

	// Debezium adds a peer to scenario 1 (PostgreSQL only): Debezium's
	// embedded engine with a counting consumer, on the same WAL and tables
	// (debezium.go). It needs java, javac and mvn; without them, or when
	// Maven cannot resolve Debezium, its row says why it was not measured.
	Debezium bool
	// CacheDir keeps what a peer needs between runs (Debezium's jars and
	// compiled main); "" means .bench-cache in the working directory.
	CacheDir string

	// Log receives progress lines (nil: discarded).
	Log io.Writer
}

// DefaultOptions are the sizes, which `make bench` uses: 1M TPC-B
// and 200k wide changes, a 10M-row pgbench_accounts table and 1M wide rows,
// 60 s of steady load, a merge of 10k keys into 1M ÷ 10M rows, and one
// 1 GiB transaction of 16 MiB values. A run takes about 20 minutes on 2
// quiet cores; the flags take smaller sizes for a quicker look (docs/benchmarks.md).
func DefaultOptions() Options {
	return Options{
		Reps:            3,
		CDCChanges:      1_000_000,
		CDCWideChanges:  200_000,
		CDCClients:      2,
		SnapshotScale:   100,
		SnapshotWide:    1_000_000,
		LatencyRate:     10_000,
		LatencyBatch:    10,
		LatencyDuration: 60 * time.Second,
		MergeRows:       1_000_000,
		MergeFactor:     10,
		MergeKeys:       10_000,
		BigRows:         64,
		BigValueBytes:   16 << 20,
		HugeValueBytes:  200 << 20,
		BacklogChanges:  1_000_000,
		BacklogCommits:  500,
	}
}

func (o *Options) fill() {
	d := DefaultOptions()
	setInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setInt(&o.Reps, d.Reps)
	setInt(&o.CDCChanges, d.CDCChanges)
	setInt(&o.CDCWideChanges, d.CDCWideChanges)
	setInt(&o.CDCClients, d.CDCClients)
	setInt(&o.SnapshotScale, d.SnapshotScale)
	setInt(&o.SnapshotWide, d.SnapshotWide)
	setInt(&o.LatencyRate, d.LatencyRate)
	setInt(&o.LatencyBatch, d.LatencyBatch)
	setInt(&o.MergeRows, d.MergeRows)
	setInt(&o.MergeFactor, d.MergeFactor)
	setInt(&o.MergeKeys, d.MergeKeys)
	setInt(&o.BigRows, d.BigRows)
	setInt(&o.BigValueBytes, d.BigValueBytes)
	setInt(&o.HugeValueBytes, d.HugeValueBytes)
	setInt(&o.BacklogChanges, d.BacklogChanges)
	setInt(&o.BacklogCommits, d.BacklogCommits)
	if o.LatencyDuration <= 0 {
		o.LatencyDuration = d.LatencyDuration
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.CacheDir == "" {
		o.CacheDir = ".bench-cache"
	}
}

func (o *Options) wants(s string) bool {
	if len(o.Scenarios) == 0 {
		return true
	}
	for _, x := range o.Scenarios {
		if x == s {
			return true
		}
	}
	return false
}

// bench is one run.
type bench struct {
	opts   Options
	srv    *server  // the PostgreSQL of a postgres run
	my     *mariadb // the MariaDB of a mysql run
	report Report
	// peakSnapshotRSS is the highest VmHWM seen during scenario 2, for 5.
	peakSnapshotRSS int64
	snapshotRan     bool
	// dbz is the prepared Debezium peer (Options.Debezium), dbzErr why it
	// cannot run here.
	dbz    *debeziumPeer
	dbzErr error
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.opts.Log, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (b *bench) detail(format string, args ...any) {
	b.report.Details = append(b.report.Details, fmt.Sprintf(format, args...))
}

// Run starts a throwaway PostgreSQL, runs the selected scenarios and
// returns the report. A scenario that fails stops the run: a table with a
// missing row would read as if the scenario did not matter.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts.fill()
	if opts.Launcher.Path == "" {
		return nil, errors.New("bench: no tidemark to run (Launcher.Path is empty)")
	}
	if opts.WorkDir == "" {
		dir, err := os.MkdirTemp("", "tidemark-bench-")
		if err != nil {
			return nil, err
		}
		opts.WorkDir = dir
	}
	if !opts.Keep {
		defer os.RemoveAll(opts.WorkDir)
	}
	if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return nil, err
	}
	b := &bench{opts: opts}
	switch opts.Source {
	case "", "postgres", "postgresql":
	case "mysql", "mariadb":
		if opts.Debezium {
			return nil, errors.New("bench: the Debezium peer (--debezium) measures its PostgreSQL connector only")
		}
		return b.runMySQL(ctx)
	default:
		return nil, fmt.Errorf("bench: unknown source %q (want postgres or mysql)", opts.Source)
	}
	b.logf("starting PostgreSQL (work dir %s)", opts.WorkDir)
	srv, err := startServer()
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	b.srv = srv
	b.report.Machine = machine("PostgreSQL " + srv.version(ctx) + " (internal/testenv: fsync=off, full_page_writes=off, synchronous_commit=on, autovacuum=off)")
	b.report.Machine = append(b.report.Machine, "tidemark: "+opts.Launcher.Path+", "+b.settings())

	steps := []struct {
		id  string
		run func(context.Context) error
	}{
		{"1", b.cdc},
		{"2", b.snapshot},
		{"3", b.latency}, // also measures 6
		{"4", b.mergeScale},
		{"5", b.memory},
		{"7", b.hugeValue},
		{"8", b.backlog},
		{"9", b.commands},
	}
	for _, s := range steps {
		want := opts.wants(s.id) || (s.id == "3" && opts.wants("6"))
		if !want {
			continue
		}
		if err := s.run(ctx); err != nil {
			return &b.report, fmt.Errorf("scenario %s: %w", s.id, err)
		}
	}
	// Scenario 3 also writes 6's row: put the rows in scenario order.
	slices.SortStableFunc(b.report.Rows, func(x, y Row) int {
		xi, _, _ := strings.Cut(x.Scenario, " ")
		yi, _, _ := strings.Cut(y.Scenario, " ")
		return strings.Compare(xi, yi)
	})
	b.report.Machine = append(b.report.Machine, "load average at the end: "+loadAvg())
	return &b.report, nil
}

// settings names the pipeline settings measured: the defaults, or the
// flags PipelineArgs added.
func (b *bench) settings() string {
	if len(b.opts.PipelineArgs) == 0 {
		return "default settings (commit_interval " + b.commitInterval().String() + ")"
	}
	return "pipeline flags " + strings.Join(b.opts.PipelineArgs, " ")
}

// commitInterval is the pipelines' commit_interval: --commit-interval of
// PipelineArgs, else the default.
func (b *bench) commitInterval() time.Duration {
	args := b.opts.PipelineArgs
	for i, a := range args {
		v, ok := strings.CutPrefix(a, "--commit-interval=")
		if !ok && a == "--commit-interval" && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if d, err := time.ParseDuration(v); ok && err == nil && d > 0 {
			return d
		}
	}
	return time.Duration(config.DefaultCommitInterval)
}

// machine describes where the run happened.
func machine(server string) []string {
	cpu := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
		f.Close()
	}
	mem := "unknown"
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				var kb int64
				fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
				mem = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
				break
			}
		}
		f.Close()
	}
	kernel := "unknown"
	if out, err := exec.Command("uname", "-sr").Output(); err == nil {
		kernel = strings.TrimSpace(string(out))
	}
	return []string{
		fmt.Sprintf("CPU: %s, %d logical cores visible to Go", cpu, runtime.NumCPU()),
		"memory: " + mem + ", kernel: " + kernel,
		server,
		"Go " + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH,
		"load average at the start: " + loadAvg(),
	}
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
