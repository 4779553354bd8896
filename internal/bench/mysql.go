package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	gmysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/tidemark/internal/bronze"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	mysqlsrc "github.com/tidemark/tidemark/internal/source/mysql"
	"github.com/tidemark/tidemark/internal/testenv"
)

// The MySQL/MariaDB run (Options.Source "mysql"): a throwaway MariaDB from
// internal/testenv (the same server the tests use: ROW binlog with full
// images and metadata, GTID strict mode, innodb_flush_log_at_trx_commit=2,
// sync_binlog=0) and two scenarios:
//
//   - 1: catch-up. A backlog of TPC-B-like transactions (4 changes each,
//     written through database/sql by CDCClients connections) sits in the
//     binlog while every tidemark is stopped; tidemark drains it into
//     committed bronze versus a bare go-mysql BinlogSyncer that reads the
//     same range with the decoder settings tidemark uses, decodes every
//     row event and discards it. That reader is the ceiling: it is the
//     replication client and row decoder tidemark itself is built on, with
//     nothing after it.
//   - 2: snapshot. A table of SnapshotScale × 100,000 pgbench_accounts-like
//     rows: tidemark's chunked snapshot into bronze (and silver) versus
//     `SELECT *` of the same table read through go-sql-driver/mysql (text
//     protocol, every column as raw bytes) and discarded.

// mariadb is the throwaway server of a mysql run.
type mariadb struct {
	m *testenv.MariaDB
}

// baselineServerID is the server_id the bare binlog reader registers with
// (tidemark's are derived from the pipeline names).
const baselineServerID = 3_999_999_001

func (b *bench) runMySQL(ctx context.Context) (*Report, error) {
	b.logf("starting MariaDB (work dir %s)", b.opts.WorkDir)
	m, err := testenv.NewMariaDB(testenv.MariaDBSetting("innodb_buffer_pool_size", "256M"))
	if err != nil {
		return nil, fmt.Errorf("start MariaDB: %w", err)
	}
	defer m.Stop()
	b.my = &mariadb{m: m}
	var version string
	if err := m.Root.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return nil, fmt.Errorf("MariaDB version: %w", err)
	}
	b.report.Machine = machine("MariaDB " + version + " (internal/testenv: binlog_format=ROW, binlog_row_image=FULL, binlog_row_metadata=FULL, GTID strict, innodb_flush_log_at_trx_commit=2, sync_binlog=0, innodb_buffer_pool_size=256M)")
	b.report.Machine = append(b.report.Machine, "tidemark: "+b.opts.Launcher.Path+", "+b.settings())
	steps := []struct {
		id  string
		run func(context.Context) error
	}{
		{"1", b.myCatchUp},
		{"2", b.mySnapshot},
	}
	ran := 0
	for _, s := range steps {
		if !b.opts.wants(s.id) {
			continue
		}
		ran++
		if err := s.run(ctx); err != nil {
			return &b.report, fmt.Errorf("mysql scenario %s: %w", s.id, err)
		}
	}
	if ran == 0 {
		return nil, errors.New("bench: the mysql source has scenarios 1 (catch-up) and 2 (snapshot) only")
	}
	b.report.Machine = append(b.report.Machine, "load average at the end: "+loadAvg())
	return &b.report, nil
}

// myDB opens a root pool on database db.
func (s *mariadb) db(db string) (*sql.DB, error) {
	return sql.Open("mysql", s.m.RootDSN(db))
}

// exec runs statements (multiStatements) in database db ("" for none).
func (s *mariadb) exec(ctx context.Context, db, query string) error {
	pool, err := s.db(db)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.ExecContext(ctx, query); err != nil {
		return fmt.Errorf("MariaDB %s: %w\nSQL: %s", db, err, query)
	}
	return nil
}

// binlogEnd is SHOW MASTER STATUS: the file and the end position of the
// last event written, and tidemark's commit-position encoding of it
// (fileIndex<<32 | pos).
func (s *mariadb) binlogEnd(ctx context.Context) (file string, pos uint32, lsn uint64, err error) {
	var doDB, ignoreDB string
	var p uint64
	if err := s.m.Root.QueryRowContext(ctx, "SHOW MASTER STATUS").Scan(&file, &p, &doDB, &ignoreDB); err != nil {
		return "", 0, 0, fmt.Errorf("SHOW MASTER STATUS: %w", err)
	}
	return file, uint32(p), binlogLSN(file, uint32(p)), nil
}

func binlogLSN(file string, pos uint32) uint64 {
	idx, _ := strconv.ParseUint(file[strings.LastIndexByte(file, '.')+1:], 10, 32)
	return idx<<32 | uint64(pos)
}

// myTPCBTables is a pgbench-like schema (scale 1: 1 branch, 10 tellers,
// 100,000 accounts); history has a key because tidemark needs one.
const myTPCBTables = `
CREATE TABLE branches (bid INT PRIMARY KEY, bbalance INT NOT NULL, filler CHAR(88));
CREATE TABLE tellers (tid INT PRIMARY KEY, bid INT NOT NULL, tbalance INT NOT NULL, filler CHAR(84));
CREATE TABLE accounts (aid INT PRIMARY KEY, bid INT NOT NULL, abalance INT NOT NULL, filler CHAR(84));
CREATE TABLE history (hid BIGINT AUTO_INCREMENT PRIMARY KEY, tid INT NOT NULL, bid INT NOT NULL, aid INT NOT NULL,
	delta INT NOT NULL, mtime DATETIME(6) NOT NULL, filler CHAR(22));
CREATE TABLE primer (id INT PRIMARY KEY);
INSERT INTO branches VALUES (1, 0, NULL);
INSERT INTO tellers SELECT seq, 1, 0, NULL FROM seq_1_to_10;
`

const myAccounts = 100_000

// myTPCB runs perClient TPC-B-like transactions on each of clients
// connections: 3 updates and 1 insert each.
func (s *mariadb) myTPCB(ctx context.Context, db string, clients, perClient int) error {
	pool, err := s.db(db)
	if err != nil {
		return err
	}
	defer pool.Close()
	pool.SetMaxOpenConns(clients)
	g, gctx := errgroup.WithContext(ctx)
	for c := 0; c < clients; c++ {
		rng := rand.New(rand.NewPCG(uint64(c), 13))
		g.Go(func() error {
			conn, err := pool.Conn(gctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			stmts := []string{
				"UPDATE accounts SET abalance = abalance + ? WHERE aid = ?",
				"SELECT abalance FROM accounts WHERE aid = ?",
				"UPDATE tellers SET tbalance = tbalance + ? WHERE tid = ?",
				"UPDATE branches SET bbalance = bbalance + ? WHERE bid = ?",
				"INSERT INTO history (tid, bid, aid, delta, mtime) VALUES (?, ?, ?, ?, NOW(6))",
			}
			prep := make([]*sql.Stmt, len(stmts))
			for i, q := range stmts {
				if prep[i], err = conn.PrepareContext(gctx, q); err != nil {
					return err
				}
				defer prep[i].Close()
			}
			for i := 0; i < perClient; i++ {
				// delta is never 0: an update that changes nothing writes no row
				// event, and every transaction must be 4 changes.
				aid, tid, delta := 1+rng.IntN(myAccounts), 1+rng.IntN(10), 1+rng.IntN(5000)
				if rng.IntN(2) == 0 {
					delta = -delta
				}
				tx, err := conn.BeginTx(gctx, nil)
				if err != nil {
					return err
				}
				var bal int
				_, err = tx.Stmt(prep[0]).ExecContext(gctx, delta, aid)
				if err == nil {
					err = tx.Stmt(prep[1]).QueryRowContext(gctx, aid).Scan(&bal)
				}
				if err == nil {
					_, err = tx.Stmt(prep[2]).ExecContext(gctx, delta, tid)
				}
				if err == nil {
					_, err = tx.Stmt(prep[3]).ExecContext(gctx, delta, 1)
				}
				if err == nil {
					_, err = tx.Stmt(prep[4]).ExecContext(gctx, tid, 1, aid, delta)
				}
				if err != nil {
					tx.Rollback()
					return fmt.Errorf("TPC-B transaction: %w", err)
				}
				if err := tx.Commit(); err != nil {
					return fmt.Errorf("TPC-B commit: %w", err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// myCatchUp is scenario 1 on MariaDB.
func (b *bench) myCatchUp(ctx context.Context) error {
	const db = "mcdc"
	c := b.opts.CDCClients
	perClient := (b.opts.CDCChanges + 4*c - 1) / (4 * c)
	changes := int64(4 * c * perClient)
	label := fmt.Sprintf("MySQL CDC catch-up: TPC-B-like, %s changes", count(changes))
	b.logf("%s: setting up", label)
	if err := b.my.exec(ctx, "", "CREATE DATABASE "+db); err != nil {
		return err
	}
	if err := b.my.exec(ctx, db, myTPCBTables+fmt.Sprintf("INSERT INTO accounts SELECT seq, 1, 0, NULL FROM seq_1_to_%d;", myAccounts)); err != nil {
		return err
	}
	reps := b.opts.Reps
	name := func(r int) string { return fmt.Sprintf("mcdc_%d", r) }
	// Every tidemark starts (no snapshot), checkpoints a primer transaction
	// and stops: its resume position is before the backlog.
	for r := 1; r <= reps; r++ {
		p, err := b.startPipeline(ctx, name(r), db, "--snapshot-enabled=false")
		if err != nil {
			return err
		}
		if err := b.my.exec(ctx, db, fmt.Sprintf("INSERT INTO primer VALUES (%d)", r)); err != nil {
			p.stop()
			return err
		}
		_, _, primed, err := b.my.binlogEnd(ctx)
		if err != nil {
			p.stop()
			return err
		}
		if _, err := p.waitPosition(ctx, 5*time.Minute, "the primer checkpointed", primed); err != nil {
			p.stop()
			return err
		}
		if err := p.stop(); err != nil {
			return err
		}
	}
	startFile, startPos, _, err := b.my.binlogEnd(ctx)
	if err != nil {
		return err
	}
	b.logf("%s: generating the backlog", label)
	genStart := time.Now()
	if err := b.my.myTPCB(ctx, db, c, perClient); err != nil {
		return err
	}
	genTime := time.Since(genStart)
	endFile, endPos, end, err := b.my.binlogEnd(ctx)
	if err != nil {
		return err
	}
	binlogBytes, err := b.my.binlogBytes(ctx, startFile, startPos, endFile, endPos)
	if err != nil {
		return err
	}
	b.logf("%s: backlog of %.0f MiB of binlog written in %s (%s)", label, float64(binlogBytes)/(1<<20), ms(genTime), rate(float64(changes)/genTime.Seconds(), "changes"))

	var tmRates, rawRates, ratios, cpuPer, rss []float64
	for r := 1; r <= reps; r++ {
		var tmTime, rawTime time.Duration
		runTM := func() error {
			p, err := b.startPipeline(ctx, name(r), db)
			if err != nil {
				return err
			}
			tmTime, err = p.waitPosition(ctx, 2*time.Hour, "the backlog checkpointed", end)
			if err == nil {
				var cpu time.Duration
				if cpu, err = p.cpuTime(); err == nil {
					cpuPer = append(cpuPer, float64(cpu.Microseconds())/float64(changes))
				}
			}
			if err == nil {
				var peak int64
				if peak, err = p.peakRSS(); err == nil {
					rss = append(rss, float64(peak))
				}
			}
			if err != nil {
				p.stop()
				return err
			}
			return p.stop()
		}
		runRaw := func() error {
			start := time.Now()
			rows, err := b.my.bareRead(ctx, startFile, startPos, end)
			rawTime = time.Since(start)
			if err == nil && rows != changes {
				err = fmt.Errorf("the bare binlog reader decoded %d rows, want %d", rows, changes)
			}
			return err
		}
		first, second := runRaw, runTM
		if r%2 == 0 {
			first, second = runTM, runRaw
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
		tm, raw := float64(changes)/tmTime.Seconds(), float64(changes)/rawTime.Seconds()
		tmRates, rawRates, ratios = append(tmRates, tm), append(rawRates, raw), append(ratios, tm/raw)
		b.logf("%s rep %d: tidemark %s (%s), bare go-mysql reader %s (%s), tidemark peak RSS %s", label, r, ms(tmTime), rate(tm, "changes"),
			ms(rawTime), rate(raw, "changes"), mib(int64(rss[len(rss)-1])))
	}
	rt := median(ratios)
	b.report.Rows = append(b.report.Rows, Row{
		Scenario: "M1 " + label,
		Tidemark: rate(median(tmRates), "changes"),
		Baseline: rate(median(rawRates), "changes") + " (bare go-mysql BinlogSyncer, rows decoded)",
		Ratio:    ratio(rt),
		Target:   "≥ 0.8",
		Met:      yesNo(rt >= 0.8),
	}, Row{
		Scenario: "M1′ Peak RSS during the catch-up",
		Tidemark: mib(int64(slicesMax(rss))), Baseline: "—", Ratio: "—",
		Target: "≤ 256 MiB", Met: yesNo(slicesMax(rss) <= memoryTarget),
	})
	chg := func(v float64) string { return rate(v, "changes") }
	b.detail("M1 %s: %.0f MiB of binlog, written in %s by %d clients; tidemark per rep: %s; bare reader per rep: %s; ratios: %s; tidemark CPU per change: %s µs; tidemark peak RSS per rep: %s",
		label, float64(binlogBytes)/(1<<20), ms(genTime), c, spread(tmRates, chg), spread(rawRates, chg), spread(ratios, ratio),
		spread(cpuPer, micro), spread(rss, func(v float64) string { return mib(int64(v)) }))
	return nil
}

func slicesMax(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// binlogBytes is the size of the binlog between two positions.
func (s *mariadb) binlogBytes(ctx context.Context, fromFile string, fromPos uint32, toFile string, toPos uint32) (int64, error) {
	rows, err := s.m.Root.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var total int64
	for rows.Next() {
		var name string
		var size int64
		dest := []any{&name, &size}
		for len(dest) < len(cols) {
			dest = append(dest, new(sql.RawBytes))
		}
		if err := rows.Scan(dest...); err != nil {
			return 0, err
		}
		if name < fromFile || name > toFile {
			continue
		}
		lo, hi := int64(0), size
		if name == fromFile {
			lo = int64(fromPos)
		}
		if name == toFile {
			hi = int64(toPos)
		}
		total += hi - lo
	}
	return total, rows.Err()
}

// bareRead is the catch-up baseline: a go-mysql BinlogSyncer, configured
// as tidemark configures its own (mysqlsrc.SyncerSettings), reading from
// file:pos until the XID event ending at or past end, decoding every row
// event and discarding it. It returns the rows decoded.
func (s *mariadb) bareRead(ctx context.Context, file string, pos uint32, end uint64) (int64, error) {
	cfg := replication.BinlogSyncerConfig{
		ServerID: baselineServerID,
		Flavor:   gmysql.MariaDBFlavor,
		Host:     s.m.Host,
		Port:     uint16(s.m.Port),
		User:     s.m.User,
		Password: s.m.Password,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	mysqlsrc.SyncerSettings(&cfg)
	syncer := replication.NewBinlogSyncer(cfg)
	defer syncer.Close()
	st, err := syncer.StartSync(gmysql.Position{Name: file, Pos: pos})
	if err != nil {
		return 0, fmt.Errorf("bare binlog reader: start at %s:%d: %w", file, pos, err)
	}
	var rows int64
	cur := file
	for {
		ev, err := st.GetEvent(ctx)
		if err != nil {
			return rows, fmt.Errorf("bare binlog reader: %w", err)
		}
		switch e := ev.Event.(type) {
		case *replication.RotateEvent:
			cur = string(e.NextLogName)
		case *replication.RowsEvent:
			rows += int64(len(e.Rows))
			if ev.Header.EventType == replication.UPDATE_ROWS_EVENTv1 || ev.Header.EventType == replication.UPDATE_ROWS_EVENTv2 ||
				ev.Header.EventType == replication.MARIADB_UPDATE_ROWS_COMPRESSED_EVENT_V1 {
				rows -= int64(len(e.Rows)) / 2 // before and after image: one change
			}
		case *replication.XIDEvent:
			if ev.Header.LogPos > 0 && binlogLSN(cur, ev.Header.LogPos) >= end {
				return rows, nil
			}
		}
	}
}

// mySnapshot is scenario 2 on MariaDB.
func (b *bench) mySnapshot(ctx context.Context) error {
	const db = "msnap"
	rows := int64(b.opts.SnapshotScale) * 100_000
	label := fmt.Sprintf("MySQL snapshot: pgbench_accounts-like, %s rows", count(rows))
	b.logf("%s: loading", label)
	if err := b.my.exec(ctx, "", "CREATE DATABASE "+db); err != nil {
		return err
	}
	if err := b.my.exec(ctx, db, fmt.Sprintf(`CREATE TABLE accounts (aid INT PRIMARY KEY, bid INT NOT NULL, abalance INT NOT NULL, filler CHAR(84));
		INSERT INTO accounts SELECT seq, 1 + seq DIV 100000, 0, REPEAT(' ', 84) FROM seq_1_to_%d;
		ANALYZE TABLE accounts`, rows)); err != nil {
		return err
	}
	var tmRates, silverRates, selRates, ratios, silverRatios, rss, cpuPer []float64
	for r := 1; r <= b.opts.Reps; r++ {
		var tmTime, silverTime, selTime time.Duration
		name := fmt.Sprintf("msnap_%d", r)
		runTM := func() error {
			p, err := b.startPipeline(ctx, name, db)
			if err != nil {
				return err
			}
			tmTime, err = p.waitFor(ctx, 4*time.Hour, "every snapshot row committed", func(m pipelineMetrics) bool { return m.rows >= rows })
			if err == nil {
				var cpu time.Duration
				if cpu, err = p.cpuTime(); err == nil {
					cpuPer = append(cpuPer, float64(cpu.Microseconds())/float64(rows))
				}
			}
			if err == nil {
				silverTime, err = p.waitTable(ctx, 4*time.Hour, []string{"silver", name, db}, "accounts")
			}
			if err == nil {
				var peak int64
				if peak, err = p.peakRSS(); err == nil {
					rss = append(rss, float64(peak))
				}
			}
			if err != nil {
				p.stop()
				return err
			}
			return p.stop()
		}
		runSelect := func() error {
			start := time.Now()
			n, err := b.my.selectAll(ctx, db, "accounts")
			selTime = time.Since(start)
			if err == nil && n != rows {
				err = fmt.Errorf("SELECT * read %d rows, want %d", n, rows)
			}
			return err
		}
		first, second := runSelect, runTM
		if r%2 == 0 {
			first, second = runTM, runSelect
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
		tm, sv, sel := float64(rows)/tmTime.Seconds(), float64(rows)/silverTime.Seconds(), float64(rows)/selTime.Seconds()
		tmRates, silverRates, selRates = append(tmRates, tm), append(silverRates, sv), append(selRates, sel)
		ratios, silverRatios = append(ratios, tm/sel), append(silverRatios, sv/sel)
		b.logf("%s rep %d: tidemark bronze %s (%s), silver %s (%s), SELECT * %s (%s), peak RSS %s", label, r, ms(tmTime), rate(tm, "rows"),
			ms(silverTime), rate(sv, "rows"), ms(selTime), rate(sel, "rows"), mib(int64(rss[len(rss)-1])))
	}
	rt, st := median(ratios), median(silverRatios)
	base := rate(median(selRates), "rows") + " (SELECT * via go-sql-driver, discarded)"
	b.report.Rows = append(b.report.Rows, Row{
		Scenario: "M2a " + label + " into bronze",
		Tidemark: rate(median(tmRates), "rows"), Baseline: base, Ratio: ratio(rt), Target: "≥ 0.5", Met: yesNo(rt >= 0.5),
	}, Row{
		Scenario: "M2c " + label + " into bronze and silver (until the silver table is published)",
		Tidemark: rate(median(silverRates), "rows"), Baseline: base, Ratio: ratio(st), Target: "≥ 0.5", Met: yesNo(st >= 0.5),
	}, Row{
		Scenario: "M2′ Peak RSS during the snapshot (bronze and silver)",
		Tidemark: mib(int64(slicesMax(rss))), Baseline: "—", Ratio: "—",
		Target: "≤ 256 MiB", Met: yesNo(slicesMax(rss) <= memoryTarget),
	})
	rowRate := func(v float64) string { return rate(v, "rows") }
	b.detail("M2 %s: tidemark into bronze per rep: %s; into bronze and silver: %s; SELECT * per rep: %s; ratios (bronze): %s; (silver): %s; tidemark CPU per row until bronze is complete: %s µs; peak RSS per rep: %s",
		label, spread(tmRates, rowRate), spread(silverRates, rowRate), spread(selRates, rowRate), spread(ratios, ratio),
		spread(silverRatios, ratio), spread(cpuPer, micro), spread(rss, func(v float64) string { return mib(int64(v)) }))
	return nil
}

// selectAll is the snapshot baseline: SELECT * of the table through
// go-sql-driver/mysql, every column scanned as raw bytes and dropped.
func (s *mariadb) selectAll(ctx context.Context, db, table string) (int64, error) {
	pool, err := s.db(db)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	rows, err := pool.QueryContext(ctx, "SELECT * FROM `"+table+"`")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	vals := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	var n int64
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// waitPosition polls the pipeline's checkpoint in its lake until its commit
// position (pipeline.Checkpoint.Pos) reaches target and returns the time
// since the process started. tidemark_capture_confirmed_lsn cannot be used
// for a MySQL source: it is computed as a PostgreSQL LSN from the resume
// token and stays 0. The checkpoint is a namespace property in the SQLite
// catalog (WAL mode): reading it does not block the pipeline's commits.
func (p *pipeline) waitPosition(ctx context.Context, timeout time.Duration, what string, target uint64) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	var cat *lake.Catalog
	defer func() {
		if cat != nil {
			cat.Close()
		}
	}()
	var last uint64
	for {
		if cat == nil {
			if _, err := os.Stat(filepath.Join(p.wh, "catalog.db")); err == nil {
				cat, _ = lake.Open(ctx, lake.Config{Warehouse: p.wh, ReadOnly: true})
			}
		}
		if cat != nil {
			cp, ok, err := bronze.LoadCheckpoint(ctx, cat, p.name)
			if err == nil && ok {
				last = cp.Pos
				if cp.Pos >= target {
					return time.Since(p.start), nil
				}
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
			return 0, fmt.Errorf("tidemark %s: %s not reached within %s (checkpoint position %d, want %d; log %s)",
				p.name, what, timeout, last, target, p.logPath)
		}
	}
}
