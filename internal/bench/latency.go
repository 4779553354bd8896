package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"golang.org/x/sync/errgroup"
)

// latency is scenario 3, and 6 from the same runs.
//
// A load generator inserts rows into a probe table at a steady rate, in
// small transactions, while tidemark runs with default settings and a
// minimal Go pgoutput consumer runs on its own slot. A row's latency is
// the time from its source commit (the commit timestamp PostgreSQL sends
// with the transaction, which bronze stores as cdc_ts) until the bronze
// snapshot holding it became readable (the write time of the metadata file
// that made the snapshot current, which the catalog then points to); the
// baseline's is the time from the same commit timestamp until the consumer
// received the commit. Server and harness share the machine's clock. Rows
// committed in the first seconds (warm-up) are left out.
//
// Scenario 6 counts, over the same steady window, the snapshots committed
// to every bronze table of the pipeline and the files written under the
// warehouse.
func (b *bench) latency(ctx context.Context) error {
	const db = "lat"
	if err := b.srv.createDB(ctx, db); err != nil {
		return err
	}
	warm := min(5*time.Second, b.opts.LatencyDuration/5)
	var p50s, p95s, p99s, bp50s, bp95s, bp99s, ratios, achieved []float64
	var snapsPerMin, filesPerMin, allFilesPerMin, avgFile, filesPerSnap []float64
	for r := 1; r <= b.opts.Reps; r++ {
		res, err := b.latencyRun(ctx, db, r, warm)
		if err != nil {
			return err
		}
		p50s, p95s, p99s = append(p50s, res.tm[0]), append(p95s, res.tm[1]), append(p99s, res.tm[2])
		bp50s, bp95s, bp99s = append(bp50s, res.base[0]), append(bp95s, res.base[1]), append(bp99s, res.base[2])
		ratios = append(ratios, res.tm[2]/res.base[2])
		achieved = append(achieved, res.rate)
		snapsPerMin = append(snapsPerMin, res.snapsPerMin)
		filesPerMin = append(filesPerMin, res.filesPerMin)
		allFilesPerMin = append(allFilesPerMin, res.allFilesPerMin)
		avgFile = append(avgFile, res.avgFileBytes)
		filesPerSnap = append(filesPerSnap, res.filesPerSnap)
		b.logf("latency rep %d: %.0f rows/s; tidemark p50/p95/p99 %.0f/%.0f/%.0f ms; receive %.1f/%.1f/%.1f ms; %.1f snapshots/min, %.1f data files/min",
			r, res.rate, res.tm[0], res.tm[1], res.tm[2], res.base[0], res.base[1], res.base[2], res.snapsPerMin, res.filesPerMin)
	}
	msf := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	p99 := median(p99s)
	if b.opts.wants("3") {
		b.report.Rows = append(b.report.Rows, Row{
			Scenario: fmt.Sprintf("3 Latency: source commit → row visible in bronze, steady %s rows/s (%d rows/tx) for %s, %s",
				count(int64(b.opts.LatencyRate)), b.opts.LatencyBatch, b.opts.LatencyDuration, b.settings()),
			Tidemark: fmt.Sprintf("p50 %.0f / p95 %.0f / p99 %.0f ms", median(p50s), median(p95s), p99),
			Baseline: fmt.Sprintf("p50 %.1f / p95 %.1f / p99 %.1f ms (pgoutput receive)", median(bp50s), median(bp95s), median(bp99s)),
			Ratio:    ratio(median(ratios)) + " (p99)",
			Target:   "p99 ≤ 1 s",
			Met:      yesNo(p99 <= 1000),
		})
		b.detail("3 latency: achieved load per rep: %s rows/s; tidemark p99 per rep: %s ms; p50: %s ms; receive p99 per rep: %s ms; warm-up of %s left out",
			spread(achieved, msf), spread(p99s, msf), spread(p50s, msf), spread(bp99s, func(v float64) string { return fmt.Sprintf("%.1f", v) }), warm)
	}
	if b.opts.wants("6") {
		spm, fps := median(snapsPerMin), median(filesPerSnap)
		want := float64(time.Minute) / float64(b.commitInterval()) // one per commit_interval
		b.report.Rows = append(b.report.Rows, Row{
			Scenario: fmt.Sprintf("6 Commit overhead at steady load (scenario 3's load: %s rows/s into one table)", count(int64(b.opts.LatencyRate))),
			Tidemark: fmt.Sprintf("%.1f snapshots/min, %.1f data files/min (avg %.0f KiB), %.0f files/min incl. metadata",
				spm, median(filesPerMin), median(avgFile)/1024, median(allFilesPerMin)),
			Baseline: fmt.Sprintf("%.0f snapshots/min (1 per commit_interval)", want),
			Ratio:    ratio(spm / want),
			Target:   "≤ 1 snapshot and 1 data file per table per commit_interval",
			Met:      yesNo(spm <= want*1.01 && fps <= 1.0),
		})
		b.detail("6 commit overhead per rep: snapshots/min %s; data files/min %s; all files/min %s; data files per snapshot %s",
			spread(snapsPerMin, func(v float64) string { return fmt.Sprintf("%.1f", v) }),
			spread(filesPerMin, func(v float64) string { return fmt.Sprintf("%.1f", v) }),
			spread(allFilesPerMin, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
			spread(filesPerSnap, func(v float64) string { return fmt.Sprintf("%.2f", v) }))
	}
	return nil
}

type latencyResult struct {
	tm, base       [3]float64 // p50, p95, p99 in ms
	rate           float64    // achieved rows/s
	snapsPerMin    float64
	filesPerMin    float64
	allFilesPerMin float64
	avgFileBytes   float64
	filesPerSnap   float64
}

func (b *bench) latencyRun(ctx context.Context, db string, r int, warm time.Duration) (latencyResult, error) {
	var res latencyResult
	tbl := fmt.Sprintf("probe_%d", r)
	name := fmt.Sprintf("lat_%d", r)
	if err := b.srv.exec(ctx, db, fmt.Sprintf(`CREATE TABLE %s (id bigserial PRIMARY KEY, v integer NOT NULL, payload text NOT NULL)`, tbl)); err != nil {
		return res, err
	}
	p, err := b.startPipeline(ctx, name, db, "--tables", "public."+tbl)
	if err != nil {
		return res, err
	}
	defer p.stop()
	if _, err := p.waitFor(ctx, 2*time.Minute, "first checkpoint", func(m pipelineMetrics) bool { return m.confirmed > 0 }); err != nil {
		return res, err
	}
	rctx, cancelRecv := context.WithCancel(ctx)
	defer cancelRecv()
	recv, err := startReceiver(rctx, b.srv.url(db), "lat_recv_"+fmt.Sprint(r), "tidemark_"+name)
	if err != nil {
		return res, err
	}
	b.logf("latency rep %d: %d rows/s for %s", r, b.opts.LatencyRate, b.opts.LatencyDuration)
	start, end, rows, err := b.steadyLoad(ctx, db, tbl)
	if err != nil {
		return res, err
	}
	res.rate = float64(rows) / end.Sub(start).Seconds()
	before, _, err := b.srv.sentinel(ctx, db)
	if err != nil {
		return res, err
	}
	if _, err := p.waitFor(ctx, 5*time.Minute, "the end of the load", func(m pipelineMetrics) bool { return m.confirmed > before }); err != nil {
		return res, err
	}
	if err := recv.waitFor(ctx, before+1, time.Minute); err != nil {
		return res, err
	}
	cancelRecv()
	<-recv.done
	if err := p.stop(); err != nil {
		return res, err
	}
	if err := b.srv.dropSlot(ctx, db, "tidemark_"+name); err != nil {
		return res, err
	}

	from := start.Add(warm)
	inWindow := func(t time.Time) bool { return !t.Before(from) && t.Before(end) }

	// tidemark: every probe row committed in the window, against the
	// visibility of the snapshot that added it.
	wh := filepath.Join(b.opts.WorkDir, "lake", name)
	lk, err := openLake(wh)
	if err != nil {
		return res, err
	}
	defer lk.close()
	t, snaps, err := lk.snapshots(ctx, []string{"bronze", name, "public", tbl})
	if err != nil {
		return res, err
	}
	var lat []float64
	for _, s := range snaps {
		err := addedTimestamps(ctx, t, s, "cdc_ts", func(us int64) {
			if c := time.UnixMicro(us); inWindow(c) {
				lat = append(lat, float64(s.visible.Sub(c))/float64(time.Millisecond))
			}
		})
		if err != nil {
			return res, err
		}
	}
	if len(lat) == 0 {
		return res, errors.New("no probe row committed in the measurement window was found in bronze")
	}
	slices.Sort(lat)
	res.tm = [3]float64{percentile(lat, 50), percentile(lat, 95), percentile(lat, 99)}
	base := recv.latencies(from, end)
	if len(base) == 0 {
		return res, errors.New("the pgoutput consumer received no row committed in the measurement window")
	}
	res.base = [3]float64{percentile(base, 50), percentile(base, 95), percentile(base, 99)}

	// Scenario 6: snapshots of every bronze table of the pipeline, and files
	// on disk, created in the window.
	minutes := end.Sub(from).Minutes()
	var nsnap, nfiles, nbytes int64
	for _, ident := range [][]string{{"bronze", name, "public", tbl}, {"bronze", name, "_messages"}, {"bronze", name, "_dead_letter"}} {
		_, ss, err := lk.snapshots(ctx, ident)
		if err != nil {
			return res, err
		}
		for _, s := range ss {
			if inWindow(s.created) {
				nsnap++
				nfiles += s.files
				nbytes += s.bytes
			}
		}
	}
	data, meta, err := filesCreated(wh, from, end)
	if err != nil {
		return res, err
	}
	res.snapsPerMin = float64(nsnap) / minutes
	res.filesPerMin = float64(nfiles) / minutes
	res.allFilesPerMin = float64(data+meta) / minutes
	if nfiles > 0 {
		res.avgFileBytes = float64(nbytes) / float64(nfiles)
	}
	if nsnap > 0 {
		res.filesPerSnap = float64(nfiles) / float64(nsnap)
	}
	return res, nil
}

// steadyLoad inserts LatencyRate rows/s into tbl, LatencyBatch rows per
// transaction, from two connections, for LatencyDuration. A connection that
// falls behind catches up as fast as it can; the achieved rate is reported.
func (b *bench) steadyLoad(ctx context.Context, db, tbl string) (start, end time.Time, rows int64, err error) {
	const workers = 2
	batch := b.opts.LatencyBatch
	perWorker := float64(b.opts.LatencyRate) / workers // rows/s
	sql := fmt.Sprintf(`INSERT INTO %s (v, payload) SELECT g, repeat('x', 64) FROM generate_series(1, %d) g`, tbl, batch)
	start = time.Now()
	stopAt := start.Add(b.opts.LatencyDuration)
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			conn, err := b.srv.connect(gctx, db)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			var sent int64
			for {
				now := time.Now()
				if !now.Before(stopAt) {
					break
				}
				due := start.Add(time.Duration(float64(sent) / perWorker * float64(time.Second)))
				if due.After(now) {
					select {
					case <-gctx.Done():
						return gctx.Err()
					case <-time.After(due.Sub(now)):
					}
					continue
				}
				if _, err := conn.Exec(gctx, sql); err != nil {
					return fmt.Errorf("load %s: %w", tbl, err)
				}
				sent += int64(batch)
			}
			mu.Lock()
			rows += sent
			mu.Unlock()
			return nil
		})
	}
	err = g.Wait()
	return start, time.Now(), rows, err
}

// receiver is a minimal pgoutput consumer: for every transaction with
// inserts it records when the commit arrived. It is the latency floor of
// any logical replication consumer.
type receiver struct {
	conn *pgconn.PgConn
	done chan struct{}

	mu      sync.Mutex
	samples []recvSample
	lastEnd uint64
	err     error
}

type recvSample struct {
	commit time.Time
	lat    time.Duration
	rows   int
}

// startReceiver creates a temporary slot on database url and streams from
// it with the options tidemark uses, until ctx is done.
func startReceiver(ctx context.Context, url, slot, publication string) (*receiver, error) {
	return openReceiver(ctx, url, slot, publication, true)
}

// openReceiver streams from slot: a new temporary one (create), or an
// existing one from its confirmed position.
func openReceiver(ctx context.Context, url, slot, publication string, create bool) (*receiver, error) {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	conn, err := pgconn.Connect(ctx, url+sep+"replication=database")
	if err != nil {
		return nil, fmt.Errorf("receiver: connect: %w", err)
	}
	var lsn pglogrepl.LSN // 0: the slot's confirmed position
	if create {
		res, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput",
			pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
		if err != nil {
			conn.Close(context.Background())
			return nil, fmt.Errorf("receiver: create slot %s: %w", slot, err)
		}
		if lsn, err = pglogrepl.ParseLSN(res.ConsistentPoint); err != nil {
			conn.Close(context.Background())
			return nil, err
		}
	}
	err = pglogrepl.StartReplication(ctx, conn, slot, lsn, pglogrepl.StartReplicationOptions{PluginArgs: []string{
		"proto_version '2'", "publication_names '" + publication + "'", "messages 'true'", "streaming 'true'",
	}})
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("receiver: start replication on %s: %w", slot, err)
	}
	r := &receiver{conn: conn, done: make(chan struct{})}
	go r.loop(ctx)
	return r, nil
}

func (r *receiver) loop(ctx context.Context) {
	defer close(r.done)
	defer r.conn.Close(context.Background())
	var (
		commitTime time.Time
		inserts    int
		lastStatus time.Time
	)
	status := func() error {
		r.mu.Lock()
		lsn := pglogrepl.LSN(r.lastEnd)
		r.mu.Unlock()
		lastStatus = time.Now()
		return pglogrepl.SendStandbyStatusUpdate(ctx, r.conn, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: lsn, WALFlushPosition: lsn, WALApplyPosition: lsn})
	}
	fail := func(err error) {
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
	}
	for ctx.Err() == nil {
		if time.Since(lastStatus) > time.Second {
			if err := status(); err != nil {
				fail(err)
				return
			}
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		msg, err := r.conn.ReceiveMessage(rctx)
		cancel()
		now := time.Now()
		if err != nil {
			if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
				continue
			}
			fail(err)
			return
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			if er, ok := msg.(*pgproto3.ErrorResponse); ok {
				fail(pgconn.ErrorResponseToPgError(er))
				return
			}
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err == nil && ka.ReplyRequested {
				if err := status(); err != nil {
					fail(err)
					return
				}
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil || len(xld.WALData) == 0 {
				continue
			}
			switch pglogrepl.MessageType(xld.WALData[0]) {
			case pglogrepl.MessageTypeBegin:
				if m, err := pglogrepl.ParseV2(xld.WALData, false); err == nil {
					commitTime = m.(*pglogrepl.BeginMessage).CommitTime
					inserts = 0
				}
			case pglogrepl.MessageTypeInsert:
				inserts++
			case pglogrepl.MessageTypeCommit:
				m, err := pglogrepl.ParseV2(xld.WALData, false)
				if err != nil {
					continue
				}
				c := m.(*pglogrepl.CommitMessage)
				r.mu.Lock()
				if inserts > 0 {
					r.samples = append(r.samples, recvSample{commit: commitTime, lat: now.Sub(commitTime), rows: inserts})
				}
				r.lastEnd = uint64(c.TransactionEndLSN)
				r.mu.Unlock()
			}
		}
	}
}

// waitFor waits until the receiver has received a commit ending at or
// after lsn.
func (r *receiver) waitFor(ctx context.Context, lsn uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		end, err := r.lastEnd, r.err
		r.mu.Unlock()
		if err != nil {
			return fmt.Errorf("receiver: %w", err)
		}
		if end >= lsn {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("receiver: did not reach %s within %s (at %s)", formatLSN(lsn), timeout, formatLSN(end))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollInterval):
		}
	}
}

// latencies returns the per-row latencies (ms, sorted) of rows committed
// within [from, to).
func (r *receiver) latencies(from, to time.Time) []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []float64
	for _, s := range r.samples {
		if s.commit.Before(from) || !s.commit.Before(to) {
			continue
		}
		for i := 0; i < s.rows; i++ {
			out = append(out, float64(s.lat)/float64(time.Millisecond))
		}
	}
	slices.Sort(out)
	return out
}
