package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"
)

// snapshotTable is one table of scenario 2.
type snapshotTable struct {
	id       string // row id: "2a"
	silverID string // row id of the bronze-and-silver row: "2c"
	short    string // for pipeline names
	schema   string
	name     string
	label    string
}

func (t snapshotTable) table() string { return t.schema + "." + t.name }

// snapshot is scenario 2: tidemark copies an existing table into bronze
// (from process start until every row is committed) versus psql running
// COPY … TO STDOUT of the same table into /dev/null. The peak RSS of the
// tidemark processes feeds scenario 5.
func (b *bench) snapshot(ctx context.Context) error {
	const db = "snap"
	accounts := int64(b.opts.SnapshotScale) * 100_000
	b.logf("snapshot: loading %d pgbench_accounts rows and %d wide rows", accounts, b.opts.SnapshotWide)
	start := time.Now()
	if err := b.srv.createDB(ctx, db); err != nil {
		return err
	}
	// dtGvp: server-side data generation, then vacuum and primary keys.
	if _, err := b.srv.runTool(ctx, db, "pgbench", "-i", "-s", fmt.Sprint(b.opts.SnapshotScale), "-q", "-I", "dtGvp"); err != nil {
		return err
	}
	if err := b.srv.exec(ctx, db, wideTable+`;
		INSERT INTO wide (name, body, doc, amount, qty, created_at, updated_at)
			SELECT `+wideValues("g")+` FROM generate_series(1, `+fmt.Sprint(b.opts.SnapshotWide)+`) g`); err != nil {
		return err
	}
	if err := b.srv.exec(ctx, db, `VACUUM ANALYZE wide`); err != nil {
		return err
	}
	b.logf("snapshot: loaded in %s", time.Since(start).Round(time.Second))
	for _, t := range []snapshotTable{
		{"2a", "2c", "acc", "public", "pgbench_accounts", fmt.Sprintf("pgbench_accounts, %s rows", count(accounts))},
		{"2b", "2d", "wide", "public", "wide", fmt.Sprintf("wide rows (~1 KB), %s rows", count(int64(b.opts.SnapshotWide)))},
	} {
		if err := b.snapshotRun(ctx, db, t); err != nil {
			return fmt.Errorf("%s: %w", t.label, err)
		}
	}
	b.snapshotRan = true
	return nil
}

func (b *bench) snapshotRun(ctx context.Context, db string, t snapshotTable) error {
	rows, err := b.srv.queryInt(ctx, db, "SELECT count(*) FROM "+t.table())
	if err != nil {
		return err
	}
	size, err := b.srv.queryInt(ctx, db, "SELECT pg_table_size($1::regclass)", t.table())
	if err != nil {
		return err
	}
	var tmRates, silverRates, copyRates, ratios, silverRatios []float64
	var rss, cpuPer []float64
	for r := 1; r <= b.opts.Reps; r++ {
		var tmTime, silverTime, copyTime time.Duration
		name := fmt.Sprintf("snap_%s_%d", t.short, r)
		runTM := func() error {
			p, err := b.startPipeline(ctx, name, db, "--tables", t.table())
			if err != nil {
				return err
			}
			tmTime, err = p.waitFor(ctx, 4*time.Hour, "every snapshot row committed", func(m pipelineMetrics) bool { return m.rows >= rows })
			if err != nil {
				p.stop()
				return err
			}
			cpu, err := p.cpuTime()
			if err != nil {
				p.stop()
				return err
			}
			cpuPer = append(cpuPer, float64(cpu.Microseconds())/float64(rows))
			// Silver is gated on the complete snapshot, built, then renamed
			// into place: its appearance is the end of the copy.
			silverTime, err = p.waitTable(ctx, 4*time.Hour, []string{"silver", name, t.schema}, t.name)
			if err != nil {
				p.stop()
				return err
			}
			peak, err := b.finish(ctx, p, db, name) // a high-water mark: bronze and silver
			if err != nil {
				return err
			}
			rss = append(rss, float64(peak))
			b.peakSnapshotRSS = max(b.peakSnapshotRSS, peak)
			return nil
		}
		runCopy := func() error {
			devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer devnull.Close()
			cmd := b.srv.tool(ctx, db, "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", "COPY "+t.table()+" TO STDOUT")
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = devnull, &stderr
			start := time.Now()
			err = cmd.Run()
			copyTime = time.Since(start)
			if err != nil {
				return fmt.Errorf("psql COPY %s: %w\n%s", t.table(), err, tail(stderr.String(), 2000))
			}
			return nil
		}
		if err := alternate(r, runTM, runCopy); err != nil {
			return err
		}
		tm, sv, cp := float64(rows)/tmTime.Seconds(), float64(rows)/silverTime.Seconds(), float64(rows)/copyTime.Seconds()
		tmRates, silverRates, copyRates = append(tmRates, tm), append(silverRates, sv), append(copyRates, cp)
		ratios, silverRatios = append(ratios, tm/cp), append(silverRatios, sv/cp)
		b.logf("%s rep %d: tidemark bronze %s (%s), silver %s (%s), COPY %s (%s), peak RSS %s", t.label, r, ms(tmTime), rate(tm, "rows"),
			ms(silverTime), rate(sv, "rows"), ms(copyTime), rate(cp, "rows"), mib(int64(rss[len(rss)-1])))
	}
	rt, st := median(ratios), median(silverRatios)
	copyRate := rate(median(copyRates), "rows") + " (COPY TO STDOUT)"
	b.report.Rows = append(b.report.Rows, Row{
		Scenario: t.id + " Snapshot into bronze: " + t.label,
		Tidemark: rate(median(tmRates), "rows"),
		Baseline: copyRate,
		Ratio:    ratio(rt),
		Target:   "≥ 0.5",
		Met:      yesNo(rt >= 0.5),
	}, Row{
		Scenario: t.silverID + " Snapshot into bronze and silver (until the silver table is published): " + t.label,
		Tidemark: rate(median(silverRates), "rows"),
		Baseline: copyRate,
		Ratio:    ratio(st),
		Target:   "≥ 0.5",
		Met:      yesNo(st >= 0.5),
	})
	rowRate := func(v float64) string { return rate(v, "rows") }
	b.detail("%s/%s %s: table %.0f MiB on disk; tidemark into bronze per rep: %s; into bronze and silver: %s; COPY per rep: %s; ratios (bronze): %s; (silver): %s; tidemark CPU per row until bronze is complete: %s µs; tidemark peak RSS per rep: %s",
		t.id, t.silverID, t.label, float64(size)/(1<<20), spread(tmRates, rowRate), spread(silverRates, rowRate),
		spread(copyRates, rowRate), spread(ratios, ratio), spread(silverRatios, ratio), spread(cpuPer, micro),
		spread(rss, func(v float64) string { return mib(int64(v)) }))
	return nil
}
