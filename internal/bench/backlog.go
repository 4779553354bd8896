package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	iceberggo "github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	cdcpipe "github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
)

// backlog is scenario 8 (issue 22): silver catching up a backlog of
// BacklogCommits bronze commits that hold BacklogChanges changes, against
// a single merge of the same changes in one bronze commit. After a crash
// loop or an outage the backlog is many small commits; its merge should
// cost what its changes cost, not what its commits do: the ratio of the
// two times (and of the two peak RSS) is the measure.
//
// Setup, in this process, for each of the two lakes: a bronze table of
// BacklogChanges rows (id, v, big: a TOAST-sized text) captured as a
// complete snapshot, and its silver table built. Each repetition writes,
// through tidemark's bronze writer, BacklogChanges updates of distinct keys
// spread over the table that leave big unchanged (TOAST: silver must take
// it from the row it holds), into one lake in BacklogCommits bronze
// commits and into the other in one; then, with the writer and its
// catalog closed, times one merge of each (silver.Merger.MergeTable with
// tidemark run's share of the default 256 MiB memory_budget and its Go
// memory limit, in this process, in alternating order). The peak RSS is
// this process's VmHWM during the merge, reset before it
// (/proc/self/clear_refs), after the heap was returned to the OS: it holds
// the harness's own few MiB as well.
func (b *bench) backlog(ctx context.Context) error {
	changes, commits := b.opts.BacklogChanges, b.opts.BacklogCommits
	lakes := []*backlogLake{
		{name: "backlog_many", commits: commits},
		{name: "backlog_one", commits: 1},
	}
	for _, l := range lakes {
		b.logf("backlog: building a silver table of %d rows (%s)", changes, l.name)
		if err := l.setup(ctx, filepath.Join(b.opts.WorkDir, "lake", l.name), changes); err != nil {
			return fmt.Errorf("backlog %s: %w", l.name, err)
		}
	}
	var manyT, oneT, manyR, oneR, timeR, rssR []float64
	for r := 1; r <= b.opts.Reps; r++ {
		for _, l := range lakes {
			if err := l.writeBacklog(ctx, changes, r); err != nil {
				return fmt.Errorf("backlog %s: %w", l.name, err)
			}
		}
		order := []*backlogLake{lakes[0], lakes[1]}
		if r%2 == 0 {
			order = []*backlogLake{lakes[1], lakes[0]}
		}
		var took [2]time.Duration
		var rss [2]int64
		for _, l := range order {
			d, peak, err := l.merge(ctx, int64(changes))
			if err != nil {
				return fmt.Errorf("backlog %s: %w", l.name, err)
			}
			i := 0
			if l == lakes[1] {
				i = 1
			}
			took[i], rss[i] = d, peak
		}
		manyT, oneT = append(manyT, took[0].Seconds()), append(oneT, took[1].Seconds())
		manyR, oneR = append(manyR, float64(rss[0])), append(oneR, float64(rss[1]))
		timeR = append(timeR, took[0].Seconds()/took[1].Seconds())
		rssR = append(rssR, float64(rss[0])/float64(rss[1]))
		b.logf("backlog rep %d: %d changes in %d bronze commits merged in %s (peak RSS %s), in 1 commit %s (%s)",
			r, changes, commits, ms(took[0]), mib(rss[0]), ms(took[1]), mib(rss[1]))
	}
	secs := func(v float64) string { return ms(time.Duration(v * float64(time.Second))) }
	mibf := func(v float64) string { return mib(int64(v)) }
	rt, rr := median(timeR), median(rssR)
	name := fmt.Sprintf("a backlog of %s changes in %s bronze commits ÷ the same changes in 1 commit", count(int64(changes)), count(int64(commits)))
	b.report.Rows = append(b.report.Rows,
		Row{
			Scenario: "8a Silver catch-up time: " + name,
			Tidemark: secs(median(manyT)) + " (" + count(int64(commits)) + " commits)",
			Baseline: secs(median(oneT)) + " (1 commit)",
			Ratio:    ratio(rt),
			Target:   "≤ 1.5",
			Met:      yesNo(rt <= 1.5),
		},
		Row{
			Scenario: "8b Silver catch-up peak RSS: " + name,
			Tidemark: mibf(median(manyR)) + " (" + count(int64(commits)) + " commits)",
			Baseline: mibf(median(oneR)) + " (1 commit)",
			Ratio:    ratio(rr),
			Target:   "≤ 1.5",
			Met:      yesNo(rr <= 1.5),
		})
	b.detail("8 backlog per rep: %s commits %s (peak RSS %s); 1 commit %s (%s); time ratios %s, RSS ratios %s (updates of distinct keys leaving a TOAST column unchanged; merge steps of %s of bronze rows)",
		count(int64(commits)), spread(manyT, secs), spread(manyR, mibf), spread(oneT, secs), spread(oneR, mibf),
		spread(timeR, ratio), spread(rssR, ratio), mib(app.SilverMaxBytes(config.DefaultMemoryBudget)))
	return nil
}

// backlogLake is one lake of scenario 8: one table, its bronze written by
// tidemark's bronze writer, its silver merged in this process.
type backlogLake struct {
	name    string
	wh      string
	commits int
	lsn     uint64
}

var backlogID = change.TableID{Schema: "public", Name: "t"}

func backlogSchema() *change.Schema {
	return &change.Schema{Key: []string{"id"}, Fields: []change.Field{
		{Name: "id", Type: iceberggo.PrimitiveTypes.Int32, SourceType: "integer"},
		{Name: "v", Type: iceberggo.PrimitiveTypes.String, SourceType: "text"},
		{Name: "big", Type: iceberggo.PrimitiveTypes.String, SourceType: "text"},
	}}
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// open opens the lake's catalog and a bronze writer on it.
func (l *backlogLake) open(ctx context.Context) (*lake.Catalog, *bronze.Writer, error) {
	cat, err := lake.Open(ctx, lake.Config{Warehouse: l.wh})
	if err != nil {
		return nil, nil, err
	}
	w, err := bronze.NewWriter(ctx, cat, l.name, "slot", discardLog())
	if err != nil {
		cat.Close()
		return nil, nil, err
	}
	if _, err := w.OpenTable(ctx, backlogID, backlogSchema()); err != nil {
		w.Close()
		cat.Close()
		return nil, nil, err
	}
	return cat, w, nil
}

func (l *backlogLake) flush(ctx context.Context, w *bronze.Writer) error {
	return w.Flush(ctx, cdcpipe.Checkpoint{Resume: strconv.FormatUint(l.lsn+1, 10), Pos: l.lsn, Watermark: time.Unix(int64(l.lsn), 0)})
}

// setup writes rows snapshot rows to bronze, as a complete snapshot, and
// builds the silver table.
func (l *backlogLake) setup(ctx context.Context, wh string, rows int) error {
	l.wh, l.lsn = wh, 1000
	cat, w, err := l.open(ctx)
	if err != nil {
		return err
	}
	defer cat.Close()
	defer w.Close()
	s := backlogSchema()
	big := strings.Repeat("payload-", 4)
	const batch = 50_000
	for start := 1; start <= rows; start += batch {
		l.lsn += 100
		var cs []*change.Change
		for id := start; id < start+batch && id <= rows; id++ {
			cs = append(cs, &change.Change{Table: backlogID, Op: change.OpRead, Schema: s,
				Values: []any{int32(id), fmt.Sprint("v", id), big},
				Pos:    change.Position{LSN: l.lsn, Seq: int64(id)}, CommitTime: time.Unix(int64(l.lsn), 0)})
		}
		status := "running"
		if start+batch > rows {
			status = "done"
		}
		props := map[string]string{cdcpipe.PropSnapshot: fmt.Sprintf(`{"status":%q,"rows":%d,"estimate":%d}`, status, start, rows)}
		if err := w.WriteBatch(ctx, backlogID, cs, props); err != nil {
			return err
		}
		if err := l.flush(ctx, w); err != nil {
			return err
		}
	}
	m := silver.NewMerger(cat, silver.Options{MaxBytes: app.SilverMaxBytes(config.DefaultMemoryBudget)}, discardLog())
	res, err := m.MergeTable(ctx, l.name, backlogID.Schema, backlogID.Name)
	if err != nil {
		return err
	}
	if !res.Published {
		return fmt.Errorf("the silver table was not published: %+v", res)
	}
	return nil
}

// writeBacklog writes `changes` updates of distinct keys (a different
// spread each repetition) in l.commits bronze commits.
func (l *backlogLake) writeBacklog(ctx context.Context, changes, rep int) error {
	cat, w, err := l.open(ctx)
	if err != nil {
		return err
	}
	defer cat.Close()
	defer w.Close()
	s := backlogSchema()
	per := (changes + l.commits - 1) / l.commits
	for i := 0; i < changes; {
		l.lsn += 100
		for j := 0; j < per && i < changes; j, i = j+1, i+1 {
			id := int32((i*7919+rep)%changes + 1) // 7919 is prime: distinct keys
			c := &change.Change{Table: backlogID, Op: change.OpUpdate, Schema: s, Values: []any{id, fmt.Sprint("r", rep), nil},
				Unchanged: []string{"big"}, Pos: change.Position{LSN: l.lsn, Seq: int64(j + 1)}, CommitTime: time.Unix(int64(l.lsn), 0)}
			if err := w.Write(ctx, c); err != nil {
				return err
			}
		}
		if err := l.flush(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

// merge merges the backlog once, as tidemark run's merger would, and
// returns its time and this process's peak RSS while it ran.
func (l *backlogLake) merge(ctx context.Context, want int64) (time.Duration, int64, error) {
	cat, err := lake.Open(ctx, lake.Config{Warehouse: l.wh})
	if err != nil {
		return 0, 0, err
	}
	defer cat.Close()
	restore := app.LimitMemory(config.DefaultMemoryBudget, discardLog())
	defer restore()
	m := silver.NewMerger(cat, silver.Options{MaxBytes: app.SilverMaxBytes(config.DefaultMemoryBudget)}, discardLog())
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0, 0, fmt.Errorf("reset the peak RSS: %w", err)
	}
	start := time.Now()
	res, err := m.MergeTable(ctx, l.name, backlogID.Schema, backlogID.Name)
	took := time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	if res.Changes != want || res.Backlog.Commits != 0 {
		return 0, 0, fmt.Errorf("the merge read %d changes and left %d bronze commits, want %d and none: %+v", res.Changes, res.Backlog.Commits, want, res)
	}
	peak, err := selfPeakRSS()
	return took, peak, err
}

// selfPeakRSS is this process's VmHWM in bytes.
func selfPeakRSS() (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
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
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}
