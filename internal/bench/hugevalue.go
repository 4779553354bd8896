package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// hugeValueSlack is what a value in flight may cost beyond memory_budget:
// scenario 7's target is budget + hugeValueSlack × the value (see
// docs/operations.md, "Large values").
const hugeValueSlack = 3

// hugeValue is scenario 7: the peak RSS of a pipeline that carries one
// value of HugeValueBytes (200 MiB by default; PostgreSQL allows 1 GB) of
// incompressible text (base64 of random bytes, stored out of line
// uncompressed), against memory_budget:
//
//   - a: snapshotting a table that holds it, until its silver table is
//     published;
//   - b: then streaming an update that replaces it with another value of
//     the same size, until silver has merged it.
//
// Each is the highest peak over the repetitions.
// pgMaxValue is about the largest text value PostgreSQL holds: a varlena
// of at most 2^30 - 1 bytes, its header included.
const pgMaxValue = 1<<30 - 1 - 64

func (b *bench) hugeValue(ctx context.Context) error {
	const db = "huge"
	if err := b.srv.createDB(ctx, db); err != nil {
		return err
	}
	size := b.opts.HugeValueBytes
	if size <= 0 || size > pgMaxValue {
		return fmt.Errorf("--huge-value-bytes %d: a PostgreSQL value holds at most %d bytes (1 GB, less its header); give at most that, e.g. 1000000000", size, pgMaxValue)
	}
	value := func() string {
		// 64 base64 characters of 48 random bytes (three md5s) a piece,
		// joined: no intermediate larger than the value, so a value up to
		// PostgreSQL's limit of 1 GB (a string of at most 2^30 - 1 bytes)
		// can be made (hex of the whole value first would be 1.5 times it).
		return fmt.Sprintf(`(SELECT string_agg(encode(decode(md5(random()::text) || md5(random()::text) || md5(random()::text), 'hex'), 'base64'), '') FROM generate_series(1, %d))`, size/64)
	}
	var snapPeak, streamPeak int64
	var snapRSS, streamRSS []float64
	for r := 1; r <= b.opts.Reps; r++ {
		tbl := fmt.Sprintf("huge_%d", r)
		b.logf("huge value rep %d: one value of %s", r, mib(int64(size)))
		if err := b.srv.exec(ctx, db, fmt.Sprintf(`CREATE TABLE %[1]s (id integer PRIMARY KEY, n integer, v text);
			ALTER TABLE %[1]s ALTER COLUMN v SET STORAGE EXTERNAL;
			INSERT INTO %[1]s VALUES (1, 1, %[2]s), (2, 1, 'small')`, tbl, value())); err != nil {
			return err
		}
		name := fmt.Sprintf("huge_%d", r)
		p, err := b.startPipeline(ctx, name, db, "--tables", "public."+tbl, "--silver-every", "1s")
		if err != nil {
			return err
		}
		if _, err := p.waitTable(ctx, time.Hour, []string{"silver", name, "public"}, tbl); err != nil {
			p.stop()
			return err
		}
		peak, err := p.peakRSS()
		if err != nil {
			p.stop()
			return err
		}
		snapPeak, snapRSS = max(snapPeak, peak), append(snapRSS, float64(peak))
		if err := b.srv.exec(ctx, db, fmt.Sprintf(`UPDATE %s SET v = %s, n = 2 WHERE id = 1`, tbl, value())); err != nil {
			p.stop()
			return err
		}
		if err := p.waitLog(ctx, time.Hour, `msg="silver merged"`, "upserts=1 "); err != nil {
			p.stop()
			return err
		}
		peak2, err := b.finish(ctx, p, db, name)
		if err != nil {
			return err
		}
		streamPeak, streamRSS = max(streamPeak, peak2), append(streamRSS, float64(peak2))
		b.logf("huge value rep %d: snapshot peak RSS %s, with the streamed update %s", r, mib(peak), mib(peak2))
		if err := b.srv.exec(ctx, db, "DROP TABLE "+tbl); err != nil {
			return err
		}
	}
	target := int64(memoryTarget) + hugeValueSlack*int64(size)
	tgt := fmt.Sprintf("≤ 256 MiB + %d × %s = %s", hugeValueSlack, mib(int64(size)), mib(target))
	b.report.Rows = append(b.report.Rows,
		Row{
			Scenario: fmt.Sprintf("7a Peak RSS snapshotting one %s value (incompressible) into bronze and silver, memory_budget 256 MiB", mib(int64(size))),
			Tidemark: mib(snapPeak), Baseline: "—", Ratio: overBudget(snapPeak, size),
			Target: tgt, Met: yesNo(snapPeak <= target),
		},
		Row{
			Scenario: fmt.Sprintf("7b Peak RSS then streaming an update to another %s value, until silver merged it", mib(int64(size))),
			Tidemark: mib(streamPeak), Baseline: "—", Ratio: overBudget(streamPeak, size),
			Target: tgt, Met: yesNo(streamPeak <= target),
		})
	b.detail("7 peak RSS per rep: snapshot and silver %s; with the streamed update %s",
		spread(snapRSS, func(v float64) string { return mib(int64(v)) }), spread(streamRSS, func(v float64) string { return mib(int64(v)) }))
	return nil
}

// waitLog waits until a line of the pipeline's log written after the
// call holds every one of parts.
func (p *pipeline) waitLog(ctx context.Context, timeout time.Duration, parts ...string) error {
	from := int64(0)
	if fi, err := os.Stat(p.logPath); err == nil {
		from = fi.Size()
	}
	deadline := time.Now().Add(timeout)
	for {
		if data, err := os.ReadFile(p.logPath); err == nil && int64(len(data)) > from {
			for _, l := range strings.Split(string(data[from:]), "\n") {
				all := true
				for _, s := range parts {
					all = all && strings.Contains(l, s)
				}
				if all {
					return nil
				}
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("tidemark %s exited (%v) while waiting for a log line with %q:\n%s", p.name, p.waitErr, parts, p.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tidemark %s: no log line with %q within %s (log %s)", p.name, parts, timeout, p.logPath)
		}
	}
}

// overBudget says how far peak is over the budget, in values of size.
func overBudget(peak int64, size int) string {
	if peak <= memoryTarget {
		return "within the budget"
	}
	return fmt.Sprintf("%.2f × the value over the budget", float64(peak-memoryTarget)/float64(size))
}
