package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/silver"
)

// mergeScale is scenario 4: the silver merge of the same number of changed
// keys into a table of N rows and one of factor × N rows. A merge should cost
// what it changes, not the size of the table: the ratio of the two times is
// the measure.
//
// Setup: both tables are captured and their silver built by a default
// tidemark run, which then stops. Each repetition changes MergeKeys keys of
// each table (keys spread evenly over the whole key range, so every bucket
// and most files are touched, as random keys would), captures the changes
// into bronze with silver off, then times one silver merge of each table
// (silver.Merger.MergeTable with the defaults, in this process, in
// alternating order).
func (b *bench) mergeScale(ctx context.Context) error {
	const db, name = "mrg", "mrg"
	small := int64(b.opts.MergeRows)
	large := small * int64(b.opts.MergeFactor)
	keys := int64(b.opts.MergeKeys)
	if keys > small {
		return fmt.Errorf("--merge-keys %d is more than the %d rows of the small table", keys, small)
	}
	tables := []struct {
		name string
		rows int64
	}{{"m_small", small}, {"m_large", large}}
	b.logf("merge scaling: loading %d and %d rows", small, large)
	if err := b.srv.createDB(ctx, db); err != nil {
		return err
	}
	for _, t := range tables {
		if err := b.srv.exec(ctx, db, fmt.Sprintf(`CREATE TABLE %[1]s (id bigint PRIMARY KEY, a integer NOT NULL, b text NOT NULL, c numeric(12,2) NOT NULL, d timestamptz NOT NULL);
			INSERT INTO %[1]s SELECT g, g %% 1000, md5(g::text), g * 0.01, now() FROM generate_series(1, %[2]d) g`, t.name, t.rows)); err != nil {
			return err
		}
	}
	p, err := b.startPipeline(ctx, name, db)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := p.waitTable(ctx, 4*time.Hour, []string{"silver", name, "public"}, t.name); err != nil {
			p.stop()
			return err
		}
	}
	if err := p.stop(); err != nil {
		return err
	}
	b.logf("merge scaling: silver built")

	var smallTimes, largeTimes, ratios []float64
	for r := 1; r <= b.opts.Reps; r++ {
		for _, t := range tables {
			step := t.rows / keys
			if err := b.srv.exec(ctx, db, fmt.Sprintf(`UPDATE %s SET a = a + 1, d = now() WHERE id %% %d = %d`, t.name, step, int64(r)%step)); err != nil {
				return err
			}
		}
		before, _, err := b.srv.sentinel(ctx, db)
		if err != nil {
			return err
		}
		p, err := b.startPipeline(ctx, name, db, "--silver-enabled=false")
		if err != nil {
			return err
		}
		if _, err := p.waitFor(ctx, time.Hour, "the changed keys in bronze", func(m pipelineMetrics) bool { return m.confirmed > before }); err != nil {
			p.stop()
			return err
		}
		if err := p.stop(); err != nil {
			return err
		}
		want := []int64{changedKeys(small, keys, int64(r)), changedKeys(large, keys, int64(r))}
		times, err := b.timeMerges(ctx, name, r%2 == 0, []string{tables[0].name, tables[1].name}, want)
		if err != nil {
			return err
		}
		smallTimes, largeTimes = append(smallTimes, times[0].Seconds()), append(largeTimes, times[1].Seconds())
		ratios = append(ratios, times[1].Seconds()/times[0].Seconds())
		b.logf("merge scaling rep %d: %d keys into %d rows %s, into %d rows %s", r, keys, small, ms(times[0]), large, ms(times[1]))
	}
	rt := median(ratios)
	secs := func(v float64) string { return ms(time.Duration(v * float64(time.Second))) }
	b.report.Rows = append(b.report.Rows, Row{
		Scenario: fmt.Sprintf("4 Merge scaling: silver merge of %s changed keys into a %s-row table ÷ into a %s-row table",
			count(keys), count(large), count(small)),
		Tidemark: secs(median(largeTimes)) + " (" + count(large) + " rows)",
		Baseline: secs(median(smallTimes)) + " (" + count(small) + " rows)",
		Ratio:    ratio(rt),
		Target:   "≤ 1.5",
		Met:      yesNo(rt <= 1.5),
	})
	b.detail("4 merge scaling per rep: %s rows %s; %s rows %s; ratios %s (silver defaults: %d buckets, merge-on-read)",
		count(small), spread(smallTimes, secs), count(large), spread(largeTimes, secs), spread(ratios, ratio), silver.DefaultBuckets)
	return nil
}

// changedKeys is how many of the keys 1..rows the update of repetition r
// changes: those with id % (rows/keys) = r % (rows/keys).
func changedKeys(rows, keys, r int64) int64 {
	step := rows / keys
	off := r % step
	if off == 0 {
		return rows / step
	}
	return (rows-off)/step + 1
}

// timeMerges merges each table once, in this process, checks that each
// merge read the changes it should, and returns the times in the order
// given (merged in reverse order when reverse).
func (b *bench) timeMerges(ctx context.Context, source string, reverse bool, tables []string, want []int64) ([]time.Duration, error) {
	cat, err := lake.Open(ctx, lake.Config{Warehouse: filepath.Join(b.opts.WorkDir, "lake", source)})
	if err != nil {
		return nil, err
	}
	defer cat.Close()
	m := silver.NewMerger(cat, silver.Options{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	out := make([]time.Duration, len(tables))
	order := make([]int, len(tables))
	for i := range order {
		order[i] = i
		if reverse {
			order[i] = len(tables) - 1 - i
		}
	}
	for _, i := range order {
		stop, err := b.mergeProfile(tables[i])
		if err != nil {
			return nil, err
		}
		start := time.Now()
		res, err := m.MergeTable(ctx, source, "public", tables[i])
		out[i] = time.Since(start)
		stop()
		if err != nil {
			return nil, fmt.Errorf("merge %s: %w", tables[i], err)
		}
		if res.Changes != want[i] {
			return nil, fmt.Errorf("merge %s read %d changes, want %d: the measurement would not be of the changed keys", tables[i], res.Changes, want[i])
		}
	}
	return out, nil
}

// mergeProfile starts a CPU profile of one timed merge in the profile
// directory (merge-<table>-<random>.pprof), if there is one; stop ends it.
func (b *bench) mergeProfile(table string) (stop func(), err error) {
	d := b.opts.Launcher.ProfileDir
	if d == "" {
		return func() {}, nil
	}
	f, err := os.CreateTemp(d, "merge-"+table+"-*.pprof")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
