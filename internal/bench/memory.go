package bench

import (
	"context"
	"fmt"
	"time"
)

// memoryTarget is the budget of scenario 5 (and tidemark's default
// memory_budget).
const memoryTarget = 256 << 20

// memory is scenario 5: the peak RSS (VmHWM) of the tidemark process
//
//   - a: during the snapshots of scenario 2;
//   - b: streaming one transaction of BigRows values of BigValueBytes each
//     (64 × 16 MiB = 1 GiB by default), stored uncompressed out of line so
//     that the WAL, the walsender's reorder buffer and the stream really
//     carry 1 GiB (PostgreSQL streams it in progress; tidemark spools it);
//   - c: snapshotting that same table.
//
// Each is the highest peak over the repetitions: a budget is about the worst
// case, not the median.
func (b *bench) memory(ctx context.Context) error {
	if b.snapshotRan {
		b.report.Rows = append(b.report.Rows, Row{
			Scenario: "5a Peak RSS during the snapshots of scenario 2 (bronze and silver)",
			Tidemark: mib(b.peakSnapshotRSS), Baseline: "—", Ratio: "—",
			Target: "≤ 256 MiB", Met: yesNo(b.peakSnapshotRSS <= memoryTarget),
		})
	} else {
		b.report.Rows = append(b.report.Rows, Row{
			Scenario: "5a Peak RSS during the snapshots of scenario 2 (bronze and silver)",
			Tidemark: "not measured (scenario 2 was not run)", Baseline: "—", Ratio: "—",
			Target: "≤ 256 MiB", Met: "—",
		})
	}
	const db = "mem"
	if err := b.srv.createDB(ctx, db); err != nil {
		return err
	}
	n, size := b.opts.BigRows, b.opts.BigValueBytes
	total := int64(n) * int64(size)
	var streamPeak, snapPeak int64
	var streamRSS, snapRSS, streamTimes, snapTimes []float64
	for r := 1; r <= b.opts.Reps; r++ {
		tbl := fmt.Sprintf("big_%d", r)
		if err := b.srv.exec(ctx, db, fmt.Sprintf(`CREATE TABLE %[1]s (id integer PRIMARY KEY, v text NOT NULL);
			ALTER TABLE %[1]s ALTER COLUMN v SET STORAGE EXTERNAL`, tbl)); err != nil {
			return err
		}
		name := fmt.Sprintf("mem_stream_%d", r)
		p, err := b.startPipeline(ctx, name, db, "--tables", "public."+tbl)
		if err != nil {
			return err
		}
		if _, err := p.waitFor(ctx, 2*time.Minute, "first checkpoint", func(m pipelineMetrics) bool { return m.confirmed > 0 }); err != nil {
			p.stop()
			return err
		}
		b.logf("memory rep %d: one transaction of %d × %d MiB", r, n, size>>20)
		start := time.Now()
		err = b.srv.exec(ctx, db, fmt.Sprintf(`INSERT INTO %s SELECT g, repeat(md5(g::text), %d) FROM generate_series(1, %d) g`, tbl, size/32, n))
		if err != nil {
			p.stop()
			return err
		}
		if _, err := p.waitFor(ctx, time.Hour, "every big row committed", func(m pipelineMetrics) bool { return m.rows >= int64(n) }); err != nil {
			p.stop()
			return err
		}
		took := time.Since(start)
		peak, err := b.finish(ctx, p, db, name)
		if err != nil {
			return err
		}
		streamPeak = max(streamPeak, peak)
		streamRSS, streamTimes = append(streamRSS, float64(peak)), append(streamTimes, took.Seconds())

		// The same table, snapshotted by a fresh pipeline.
		name = fmt.Sprintf("mem_snap_%d", r)
		p, err = b.startPipeline(ctx, name, db, "--tables", "public."+tbl)
		if err != nil {
			return err
		}
		took, err = p.waitFor(ctx, time.Hour, "every big row committed", func(m pipelineMetrics) bool { return m.rows >= int64(n) })
		if err != nil {
			p.stop()
			return err
		}
		peak2, err := b.finish(ctx, p, db, name)
		if err != nil {
			return err
		}
		snapPeak = max(snapPeak, peak2)
		snapRSS, snapTimes = append(snapRSS, float64(peak2)), append(snapTimes, took.Seconds())
		b.logf("memory rep %d: stream peak RSS %s (%.1f s from commit to bronze), snapshot peak RSS %s (%.1f s)", r, mib(peak), streamTimes[len(streamTimes)-1], mib(peak2), took.Seconds())
		if err := b.srv.exec(ctx, db, "DROP TABLE "+tbl); err != nil {
			return err
		}
	}
	label := fmt.Sprintf("%d × %s values", n, mib(int64(size)))
	b.report.Rows = append(b.report.Rows,
		Row{
			Scenario: fmt.Sprintf("5b Peak RSS streaming one %s transaction of %s", mib(total), label),
			Tidemark: mib(streamPeak), Baseline: "—", Ratio: "—", Target: "≤ 256 MiB", Met: yesNo(streamPeak <= memoryTarget),
		},
		Row{
			Scenario: fmt.Sprintf("5c Peak RSS snapshotting a table of %s", label),
			Tidemark: mib(snapPeak), Baseline: "—", Ratio: "—", Target: "≤ 256 MiB", Met: yesNo(snapPeak <= memoryTarget),
		})
	secs := func(v float64) string { return fmt.Sprintf("%.1f s", v) }
	b.detail("5b peak RSS per rep: %s; from the INSERT's start to all rows in bronze, per rep: %s", spread(streamRSS, func(v float64) string { return mib(int64(v)) }), spread(streamTimes, secs))
	b.detail("5c peak RSS per rep: %s; snapshot time per rep: %s", spread(snapRSS, func(v float64) string { return mib(int64(v)) }), spread(snapTimes, secs))
	return nil
}
