package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// cdcWorkload is one change workload of scenario 1.
type cdcWorkload struct {
	id       string // row id: "1a"
	label    string
	db       string
	setup    func(ctx context.Context) error
	generate func(ctx context.Context) (changes int64, err error)
}

// cdc is scenario 1, CDC catch-up: a backlog of N changes sits in the WAL;
// tidemark drains it into committed bronze (from process start until the
// confirmed LSN passes the end of the backlog) versus pg_recvlogical
// draining the same WAL range from its own pgoutput slot into /dev/null.
// Every slot is created before the workload, so every consumer decodes the
// same range.
func (b *bench) cdc(ctx context.Context) error {
	for _, w := range []cdcWorkload{b.tpcbWorkload(), b.wideWorkload()} {
		if err := b.cdcRun(ctx, w); err != nil {
			return fmt.Errorf("%s: %w", w.label, err)
		}
	}
	return nil
}

const benchPublication = "bench_pub"

func (b *bench) tpcbWorkload() cdcWorkload {
	const db = "cdc_tpcb"
	n := b.opts.CDCChanges
	c := b.opts.CDCClients
	perClient := (n + 4*c - 1) / (4 * c)
	return cdcWorkload{
		id:    "1a",
		label: fmt.Sprintf("CDC catch-up: pgbench TPC-B, %s changes", count(int64(4*c*perClient))),
		db:    db,
		setup: func(ctx context.Context) error {
			if err := b.srv.createDB(ctx, db); err != nil {
				return err
			}
			if _, err := b.srv.runTool(ctx, db, "pgbench", "-i", "-s", "1", "-q"); err != nil {
				return err
			}
			// tidemark needs a key on every published table; pgbench_history has none.
			return b.srv.exec(ctx, db, `ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY;
				CREATE PUBLICATION `+benchPublication+` FOR ALL TABLES`)
		},
		generate: func(ctx context.Context) (int64, error) {
			_, err := b.srv.runTool(ctx, db, "pgbench", "-n", "-M", "prepared",
				"-c", fmt.Sprint(c), "-j", fmt.Sprint(c), "-t", fmt.Sprint(perClient))
			return int64(4 * c * perClient), err
		},
	}
}

// wideColumns is the wide-row table of scenarios 1 and 2: about 1 KB a row
// of text, jsonb, numeric and timestamptz (none of it TOASTed).
const wideTable = `CREATE TABLE wide (
	id bigserial PRIMARY KEY,
	name text NOT NULL,
	body text NOT NULL,
	doc jsonb NOT NULL,
	amount numeric(18,4) NOT NULL,
	qty integer NOT NULL,
	created_at timestamptz NOT NULL,
	updated_at timestamptz NOT NULL)`

// wideValues are the value expressions of one wide row; $s is a seed
// expression (an integer).
func wideValues(s string) string {
	return fmt.Sprintf(`md5(%[1]s::text),
		repeat(md5((%[1]s * 7)::text), 18),
		jsonb_build_object('sku', md5((%[1]s * 3)::text), 'qty', (%[1]s %% 100)::int,
			'tags', jsonb_build_array(md5((%[1]s * 5)::text), md5((%[1]s * 11)::text), md5((%[1]s * 13)::text)),
			'price', (%[1]s %% 100000) / 100.0, 'note', md5((%[1]s * 17)::text) || md5((%[1]s * 19)::text)),
		(%[1]s %% 1000000) / 10000.0,
		(%[1]s %% 1000)::int,
		now(), now()`, "(("+s+")::bigint)")
}

const widePreload = 10000

func (b *bench) wideWorkload() cdcWorkload {
	const db = "cdc_wide"
	n := b.opts.CDCWideChanges
	c := b.opts.CDCClients
	perClient := (n + 2*c - 1) / (2 * c)
	return cdcWorkload{
		id:    "1b",
		label: fmt.Sprintf("CDC catch-up: wide rows (~1 KB: text, jsonb, numeric, timestamptz), %s changes", count(int64(2*c*perClient))),
		db:    db,
		setup: func(ctx context.Context) error {
			if err := b.srv.createDB(ctx, db); err != nil {
				return err
			}
			return b.srv.exec(ctx, db, wideTable+`;
				INSERT INTO wide (name, body, doc, amount, qty, created_at, updated_at)
					SELECT `+wideValues("g")+` FROM generate_series(1, `+fmt.Sprint(widePreload)+`) g;
				CREATE PUBLICATION `+benchPublication+` FOR ALL TABLES`)
		},
		generate: func(ctx context.Context) (int64, error) {
			// One update of a random existing row and one insert per transaction.
			script := fmt.Sprintf(`\set id random(1, %d)
\set s random(1, 1000000000)
BEGIN;
UPDATE wide SET (name, body, doc, amount, qty, created_at, updated_at) = (%s) WHERE id = :id;
INSERT INTO wide (name, body, doc, amount, qty, created_at, updated_at) VALUES (%s);
END;
`, widePreload, wideValues(":s"), wideValues(":s + 1"))
			path := filepath.Join(b.opts.WorkDir, "wide.pgbench")
			if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
				return 0, err
			}
			_, err := b.srv.runTool(ctx, db, "pgbench", "-n", "-M", "prepared", "-f", path,
				"-c", fmt.Sprint(c), "-j", fmt.Sprint(c), "-t", fmt.Sprint(perClient))
			return int64(2 * c * perClient), err
		},
	}
}

func formatLSN(lsn uint64) string { return fmt.Sprintf("%X/%X", lsn>>32, uint32(lsn)) }

func (b *bench) cdcRun(ctx context.Context, w cdcWorkload) error {
	b.logf("%s: setting up", w.label)
	if err := w.setup(ctx); err != nil {
		return err
	}
	dbz, err := b.newDebeziumRun(ctx, w)
	if err != nil {
		return err
	}
	reps := b.opts.Reps
	name := func(r int) string { return fmt.Sprintf("cdc_%s_%d", w.db[len("cdc_"):], r) }
	recvSlot := func(r int) string { return fmt.Sprintf("recv_%s_%d", w.db[len("cdc_"):], r) }
	rawSlot := func(r int) string { return fmt.Sprintf("raw_%s_%d", w.db[len("cdc_"):], r) }
	runFlags := []string{"--publication", benchPublication, "--snapshot-enabled=false"}

	// Every tidemark creates its slot, bronze tables and checkpoint, then
	// stops; then the pg_recvlogical slots; then the workload.
	for r := 1; r <= reps; r++ {
		p, err := b.startPipeline(ctx, name(r), w.db, runFlags...)
		if err != nil {
			return err
		}
		if _, err := p.waitFor(ctx, 2*time.Minute, "first checkpoint", func(m pipelineMetrics) bool { return m.confirmed > 0 }); err != nil {
			p.stop()
			return err
		}
		if err := p.stop(); err != nil {
			return err
		}
	}
	for r := 1; r <= reps; r++ {
		for _, s := range []string{recvSlot(r), rawSlot(r)} {
			if err := b.srv.createSlot(ctx, w.db, s); err != nil {
				return err
			}
		}
	}
	if dbz != nil {
		if err := dbz.createSlots(ctx, reps); err != nil {
			return err
		}
	}
	b.logf("%s: generating the workload", w.label)
	genStart := time.Now()
	changes, err := w.generate(ctx)
	if err != nil {
		return err
	}
	before, after, err := b.srv.sentinel(ctx, w.db)
	if err != nil {
		return err
	}
	startLSN, err := b.srv.queryInt(ctx, w.db, `SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1`, recvSlot(1))
	if err != nil {
		return err
	}
	walBytes := int64(after) - startLSN
	if dbz != nil {
		if err := dbz.findLastCommit(ctx, uint64(startLSN), before); err != nil {
			return err
		}
	}
	b.logf("%s: %d changes, %.1f MiB of WAL, generated in %s", w.label, changes, float64(walBytes)/(1<<20), time.Since(genStart).Round(time.Second))

	var tmRates, recvRates, rawRates, ratios, rawRatios, cpuPer, tmRSS []float64
	for r := 1; r <= reps; r++ {
		var tmTime, recvTime, rawTime, tmCPU time.Duration
		var tmPeak int64
		runTM := func() error {
			p, err := b.startPipeline(ctx, name(r), w.db, runFlags...)
			if err != nil {
				return err
			}
			tmTime, err = p.waitFor(ctx, 2*time.Hour, "the end of the backlog", func(m pipelineMetrics) bool { return m.confirmed > before })
			if err == nil {
				tmCPU, err = p.cpuTime()
			}
			if err == nil {
				tmPeak, err = p.peakRSS()
			}
			if err != nil {
				p.stop()
				return err
			}
			return p.stop()
		}
		runRecv := func() error {
			start := time.Now()
			_, err := b.srv.runTool(ctx, w.db, "pg_recvlogical", "-d", w.db, "--slot", recvSlot(r), "--start",
				"--endpos", formatLSN(after), "--no-loop", "-f", "/dev/null",
				"-o", "proto_version=2", "-o", "publication_names="+benchPublication,
				"-o", "messages=true", "-o", "streaming=true")
			recvTime = time.Since(start)
			return err
		}
		// A second, leaner drain: a Go pgoutput consumer that parses nothing
		// but commits, to tell whether pg_recvlogical itself is the limit.
		runRaw := func() error {
			start := time.Now()
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			rc, err := openReceiver(rctx, b.srv.url(w.db), rawSlot(r), benchPublication, false)
			if err != nil {
				return err
			}
			err = rc.waitFor(ctx, before+1, 2*time.Hour)
			rawTime = time.Since(start)
			cancel()
			<-rc.done
			return err
		}
		runs := []func() error{runRecv, runTM, runRaw}
		if dbz != nil {
			runs = append(runs, func() error { return dbz.run(ctx, r, changes) })
		}
		// Rotate the order each repetition, so that no consumer always
		// runs first (on a colder cache) or last.
		k := (r - 1) % len(runs)
		order := append(slices.Clone(runs[k:]), runs[:k]...)
		for _, run := range order {
			if err := run(); err != nil {
				return err
			}
		}
		slots := []string{recvSlot(r), rawSlot(r), "tidemark_" + name(r)}
		if dbz != nil {
			slots = append(slots, dbz.slot(r))
		}
		for _, s := range slots {
			if err := b.srv.dropSlot(ctx, w.db, s); err != nil {
				return err
			}
		}
		tm, rc := float64(changes)/tmTime.Seconds(), float64(changes)/recvTime.Seconds()
		raw := float64(changes) / rawTime.Seconds()
		if dbz != nil {
			dbz.pair(rc, tm)
		}
		tmRates, recvRates, ratios = append(tmRates, tm), append(recvRates, rc), append(ratios, tm/rc)
		rawRates, rawRatios = append(rawRates, raw), append(rawRatios, tm/raw)
		cpuPer = append(cpuPer, float64(tmCPU.Microseconds())/float64(changes))
		tmRSS = append(tmRSS, float64(tmPeak))
		b.logf("%s rep %d: tidemark %s (%s), pg_recvlogical %s (%s), bare consumer %s (%s)", w.label, r, ms(tmTime), rate(tm, "changes"),
			ms(recvTime), rate(rc, "changes"), ms(rawTime), rate(raw, "changes"))
	}
	rt := median(ratios)
	b.report.Rows = append(b.report.Rows, Row{
		Scenario: w.id + " " + w.label,
		Tidemark: rate(median(tmRates), "changes"),
		Baseline: rate(median(recvRates), "changes") + " (pg_recvlogical)",
		Ratio:    ratio(rt),
		Target:   "≥ 0.8",
		Met:      yesNo(rt >= 0.8),
	}, Row{
		// pg_recvlogical is the baseline, but it is not the ceiling:
		// a consumer that does nothing drains the same slot faster.
		Scenario: w.id + "′ same, against a bare pgoutput consumer (Go, parses only commits): the decoding ceiling",
		Tidemark: rate(median(tmRates), "changes"),
		Baseline: rate(median(rawRates), "changes") + " (bare consumer)",
		Ratio:    ratio(median(rawRatios)),
		Target:   "— (reference)",
		Met:      "—",
	})
	chg := func(v float64) string { return rate(v, "changes") }
	b.detail("%s %s: %.0f MiB of WAL; tidemark per rep: %s; pg_recvlogical per rep: %s; ratios: %s; tidemark CPU per change: %s µs; "+
		"tidemark peak RSS per rep: %s; a bare Go pgoutput consumer (parses only commits) per rep: %s; ratios: %s",
		w.id, w.label, float64(walBytes)/(1<<20), spread(tmRates, chg), spread(recvRates, chg), spread(ratios, ratio),
		spread(cpuPer, micro), spread(tmRSS, func(v float64) string { return mib(int64(v)) }), spread(rawRates, chg), spread(rawRatios, ratio))
	if dbz != nil {
		dbz.report(recvRates, rt)
	}
	return nil
}
