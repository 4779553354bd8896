package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/lake"
)

// This file is one table's verification, top to bottom:
//
//  1. Open a consistent snapshot of the source (Source.Snapshot) and read
//     the commit position L it covers; hash every chunk of the table in it.
//  2. Wait until silver holds the source up to L, and hash silver's chunks.
//  3. Drill into the chunks whose hashes differ: per key, source and silver
//     row digests; keys that differ become candidates.
//  4. Check the candidates row by row (the same snapshots), then again in
//     later rounds (a new source snapshot, silver past its position), until
//     each is equal or confirmed different.
//
// Silver at position P >= L holds every change committed below L, plus
// later ones, so a key can differ only because it changed while verify ran
// (or, rarely, because a transaction whose commit record lies below L was
// still in flight when the snapshot was taken). A difference is confirmed
// only when no such change can explain it:
//
//   - the source row exists: its tuple version (xmin, ctid) is read again
//     in a snapshot taken after silver was read. Every UPDATE, DELETE or
//     re-INSERT makes a new version, so an unchanged version proves the row
//     was not touched while silver was read, and silver's row must be older
//     than L (its cdc_source_lsn; or missing). Then the difference is real.
//   - the source has no row but silver has one: silver's row must be older
//     than L and the key still absent after silver was read, in two
//     consecutive checks with silver's row unchanged (the first could be an
//     insert in flight at the snapshot, deleted again before the recheck).
//   - two live silver rows for one key: silver commits are atomic, so this
//     is never a passing state.
//
// A key that changed during every check is "unsettled": neither equal nor
// confirmed different.

// cand is a key whose rows differed at least once.
type cand struct {
	keyVals []any
	// stable counts the checks that support a confirmed difference; 2
	// confirms it.
	stable  int
	lastLSN int64
	diff    *Difference
	done    bool // equal
}

// behindError: silver did not reach the source position within the wait.
type behindError struct{ msg string }

func (e *behindError) Error() string { return e.msg }

func (v *verifier) table(ctx context.Context, t TableName) (tr TableReport) {
	start := time.Now()
	tr = TableReport{Table: strings.Join(silverIdent(v.opts.Source, t), "."), Source: t.String()}
	defer func() { tr.Seconds = time.Since(start).Seconds() }()
	err := v.compare(ctx, t, &tr, v.pushdown)
	if errors.Is(err, ErrPushdown) {
		// The server refused the hashing SQL (md5 disabled under FIPS, an
		// expression a type does not support): hash in Go instead.
		v.log.Warn("chunk hashing at the source failed; hashing in tidemark instead", "table", t.String(), "error", err.Error())
		tr = TableReport{Table: tr.Table, Source: tr.Source}
		err = v.compare(ctx, t, &tr, false)
	}
	if err != nil {
		var be *behindError
		if errors.As(err, &be) {
			tr.Status, tr.Reason = StatusBehind, be.msg
		} else {
			tr.Status, tr.Reason = StatusError, err.Error()
		}
	}
	return tr
}

func (v *verifier) compare(ctx context.Context, t TableName, tr *TableReport, pushdown bool) error {
	s, err := v.cat.Open(ctx, silverIdent(v.opts.Source, t))
	if errors.Is(err, lake.ErrNoSuchTable) {
		tr.Status, tr.Reason = StatusNotPublished, notPublishedReason(ctx, v.cat, v.opts.Source, t)
		return nil
	}
	if err != nil {
		return err
	}
	snap, err := v.src.Snapshot(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if snap != nil {
			snap.Close()
		}
	}()
	st, err := snap.Describe(ctx, t)
	if err != nil {
		return err
	}
	if st == nil {
		tr.Status = StatusMissingAtSource
		tr.Reason = fmt.Sprintf("the source has no table %s (dropped or renamed?), but silver still has one", t)
		return nil
	}
	sk, err := silverKey(s)
	if err != nil {
		return fmt.Errorf("silver table %s: %w", tr.Table, err)
	}
	// A declared merge key, or for a source table without a key the key
	// silver is merged by (REPLICA IDENTITY FULL: the whole row), is what
	// the rows are compared by.
	if want := v.opts.MergeKeys[t]; len(want) > 0 || len(st.Key) == 0 && len(sk) > 0 {
		if len(want) == 0 {
			want = sk
		}
		if err := st.rekey(want); err != nil {
			return fmt.Errorf("the source table %s: %w", t, err)
		}
	}
	if len(st.Key) == 0 {
		return fmt.Errorf("the source table %s has no primary key or replica identity index to compare by", t)
	}
	if msg := timeAsMismatch(st, s.ArrowSchema()); msg != "" {
		return fmt.Errorf("silver table %s: %s", tr.Table, msg)
	}
	if sk != nil && !slices.Equal(sk, st.keyNames()) {
		tr.Status = StatusDifferent
		tr.Reason = fmt.Sprintf("the source table's key is (%s) but silver is keyed by (%s)",
			strings.Join(st.keyNames(), ", "), strings.Join(sk, ", "))
		return nil
	}

	est := st.Estimate
	if n, err := strconv.ParseInt(s.Summary()["total-records"], 10, 64); err == nil && n > est {
		est = n
	}
	n := int(min(max(est/int64(v.opts.ChunkRows)+1, 1), 1<<20))
	rd := newSourceReader(snap, st, n, pushdown)
	tr.Pushdown, tr.Chunks, tr.Position = rd.pushdown, n, v.src.FormatPosition(snap.Position())

	// Hash the source's chunks while waiting for silver and hashing its own:
	// the source works in its server, silver here.
	var (
		srcChunks map[int]*ChunkSum
		srcErr    error
		srcDone   = make(chan struct{})
	)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	passStart := time.Now()
	var srcTook time.Duration
	go func() {
		defer close(srcDone)
		srcChunks, srcErr = rd.chunks(sctx, snap)
		srcTook = time.Since(passStart)
	}()
	silverT, _, err := v.waitCovered(ctx, t, snap.Position())
	var lkChunks map[int]*ChunkSum
	var lkRows int64
	waited := time.Since(passStart)
	if err == nil {
		lkChunks, lkRows, err = lakeChunks(ctx, silverT, st, n)
	}
	lakeTook := time.Since(passStart) - waited
	if err != nil {
		scancel() // the source may close its connection; the next snapshot reconnects
	}
	<-srcDone
	if err != nil {
		return err
	}
	if srcErr != nil {
		return srcErr
	}
	tr.SilverRows = lkRows
	var differing []int
	for b, c := range srcChunks {
		tr.SourceRows += c.N
		if l := lkChunks[b]; l == nil || *l != *c {
			differing = append(differing, b)
		}
	}
	for b := range lkChunks {
		if srcChunks[b] == nil {
			differing = append(differing, b)
		}
	}
	slices.Sort(differing)
	tr.ChunksDiffering = len(differing)
	v.log.Debug("chunks hashed", "table", t.String(), "chunks", n, "differing", len(differing), "pushdown", rd.pushdown,
		"source_rows", tr.SourceRows, "source_took", srcTook, "silver_wait", waited, "silver_rows", lkRows, "silver_took", lakeTook)

	// Drill into the differing chunks, a memory-bounded batch at a time.
	cands := map[string]*cand{}
	capped := false
	add := func(key string, kv []any) {
		if cands[key] != nil {
			return
		}
		if len(cands) >= v.opts.MaxCandidates {
			capped = true
			return
		}
		cands[key] = &cand{keyVals: kv, lastLSN: -2}
	}
	for len(differing) > 0 && !capped {
		batch := map[int]bool{}
		rows := 0
		for len(differing) > 0 {
			b := differing[0]
			w := 0
			if c := srcChunks[b]; c != nil {
				w = int(c.N)
			}
			if c := lkChunks[b]; c != nil {
				w = max(w, int(c.N))
			}
			if len(batch) > 0 && rows+w > v.opts.DrillRows {
				break
			}
			batch[b], rows = true, rows+w
			differing = differing[1:]
		}
		lk, err := lakeDrill(ctx, silverT, st, n, batch)
		if err != nil {
			return err
		}
		err = rd.drill(ctx, snap, batch, func(kv []any, key string, row Digest) error {
			if e := lk[key]; e != nil {
				if e.row != row || e.count > 1 {
					add(key, kv)
				}
				delete(lk, key)
				return nil
			}
			add(key, kv)
			return nil
		})
		if err != nil {
			return err
		}
		for key, e := range lk {
			add(key, e.keyVals)
		}
	}

	// First check, in the same source snapshot and silver snapshot.
	first := snap
	snap = nil
	if err := v.check(ctx, t, st, first, silverT, cands); err != nil {
		return err
	}
	tr.Rechecked = len(cands)

	// Rechecks.
	for round := 1; round <= v.opts.Rounds; round++ {
		pending := map[string]*cand{}
		for k, c := range cands {
			if !c.done && c.stable < 2 {
				pending[k] = c
			}
		}
		if len(pending) == 0 {
			break
		}
		tr.Rounds = round
		s, err := v.src.Snapshot(ctx)
		if err != nil {
			return err
		}
		if err := v.check(ctx, t, st, s, nil, pending); err != nil {
			return err
		}
	}

	var diffs []Difference
	var unsettled []string
	for _, c := range cands {
		switch {
		case c.done:
		case c.stable >= 2:
			diffs = append(diffs, *c.diff)
		default:
			unsettled = append(unsettled, renderKey(st, c.keyVals))
		}
	}
	slices.SortFunc(diffs, func(a, b Difference) int { return strings.Compare(a.Key, b.Key) })
	slices.Sort(unsettled)
	tr.DifferencesTotal, tr.AtLeast = len(diffs), capped
	if v.opts.MaxReport > 0 && len(diffs) > v.opts.MaxReport {
		diffs = diffs[:v.opts.MaxReport]
	}
	tr.Differences, tr.Unsettled = diffs, unsettled
	switch {
	case tr.DifferencesTotal > 0:
		tr.Status = StatusDifferent
	case capped:
		tr.Status = StatusIncomplete
		tr.Reason = fmt.Sprintf("more than %d keys differed or changed while the table was compared, and those followed "+
			"turned out equal or kept changing: run verify again at a quieter moment", v.opts.MaxCandidates)
	case len(unsettled) > 0:
		tr.Status = StatusUnsettled
		tr.Reason = fmt.Sprintf("%d key(s) changed at the source during each of the %d checks, so their rows could not be "+
			"compared at one position: run verify again at a quieter moment", len(unsettled), tr.Rounds+1)
	default:
		tr.Status = StatusEqual
	}
	return nil
}

// check checks the candidates once: their source rows at snap (which it
// closes), silver's rows in silverT (nil: the silver table once it covers
// snap's position), then the source rows' versions again.
func (v *verifier) check(ctx context.Context, t TableName, st *SourceTable, snap Snapshot, silverT lake.Table, cands map[string]*cand) error {
	defer snap.Close()
	if len(cands) == 0 {
		return nil
	}
	keys := make([][]any, 0, len(cands))
	km := make(map[string][]any, len(cands))
	for k, c := range cands {
		keys = append(keys, c.keyVals)
		km[k] = c.keyVals
	}
	src, err := snap.Fetch(ctx, st, keys)
	if err != nil {
		return err
	}
	snap.Close()
	lsn := snap.Position()
	if silverT == nil {
		if silverT, _, err = v.waitCovered(ctx, t, lsn); err != nil {
			return err
		}
	}
	lk, err := lakeFetch(ctx, silverT, st, km)
	if err != nil {
		return err
	}
	after, err := v.src.Snapshot(ctx)
	if err != nil {
		return err
	}
	later, err := after.Fetch(ctx, st, keys)
	after.Close()
	if err != nil {
		return err
	}
	for k, c := range cands {
		judge(v.src, st, c, src[k], lk[k], later[k], lsn)
	}
	return nil
}

// judge records one check of a key: src is the source row at a snapshot
// covering lsn (nil: none), lk silver's live rows at a position at or
// above lsn, later the source row in a snapshot taken after silver was
// read. See the top of this file for the rules.
func judge(src0 Source, st *SourceTable, c *cand, src *Fetched, lk []lakeRowVals, later *Fetched, lsn uint64) {
	d := &Difference{Key: renderKey(st, c.keyVals)}
	var rowLSN int64 = -1
	for _, r := range lk {
		rowLSN = max(rowLSN, r.lsn)
	}
	if rowLSN >= 0 {
		d.SilverLSN = src0.FormatPosition(uint64(rowLSN))
	}
	older := rowLSN < 0 || uint64(rowLSN) < lsn
	switch {
	case src == nil && len(lk) == 0:
		c.done = true
		return
	case len(lk) > 1:
		d.Kind = KindDuplicate
		if src != nil {
			d.Columns = columnDiffs(st, src.Vals, lk[0])
		}
		c.stable = 2
	case len(lk) == 0:
		d.Kind = KindMissing
		c.stable = 0
		if later != nil && later.TID == src.TID {
			c.stable = 2
		}
	case src == nil:
		d.Kind = KindExtra
		d.Columns = extraColumns(st, lk[0])
		switch {
		case later != nil || !older:
			c.stable = 0
		case c.stable > 0 && c.lastLSN == rowLSN:
			c.stable++
		default:
			c.stable = 1
		}
	default:
		d.Kind = KindValues
		d.Columns = columnDiffs(st, src.Vals, lk[0])
		if len(d.Columns) == 0 {
			c.done = true
			return
		}
		c.stable = 0
		if older && later != nil && later.TID == src.TID {
			c.stable = 2
		}
	}
	c.done, c.lastLSN, c.diff = false, rowLSN, d
}

// extraColumns shows the key and a few columns of a row only silver has.
func extraColumns(st *SourceTable, lk lakeRowVals) []ColumnDiff {
	var out []ColumnDiff
	for j, c := range st.Cols {
		if len(out) == 4 {
			break
		}
		out = append(out, ColumnDiff{Column: c.Name, Source: "(no row)", Silver: display(lk.vals[j], lk.types[j], displayWidth)})
	}
	return out
}

// displayWidth bounds a rendered value in a report.
const displayWidth = 60

func columnDiffs(st *SourceTable, src []any, lk lakeRowVals) []ColumnDiff {
	var out []ColumnDiff
	var a, b []byte
	for j, c := range st.Cols {
		a = AppendField(a[:0], src[j], c.Arrow)
		b = AppendField(b[:0], lk.vals[j], lk.types[j])
		if bytes.Equal(a, b) {
			continue
		}
		sv := display(lk.vals[j], lk.types[j], displayWidth)
		if lk.types[j] == nil || lk.types[j].ID() == 0 {
			sv = "NULL (silver has no such column)"
		}
		out = append(out, ColumnDiff{Column: c.Name, Source: display(src[j], c.Arrow, displayWidth), Silver: sv})
	}
	return out
}

// renderKey renders key values as col=value, ...
func renderKey(st *SourceTable, kv []any) string {
	parts := make([]string, len(kv))
	for i, v := range kv {
		parts[i] = st.Key[i].Name + "=" + display(v, st.Key[i].Arrow, displayWidth)
	}
	return strings.Join(parts, ", ")
}

// waitCovered waits until silver holds the source up to lsn and returns
// the silver table as loaded then (its scans read that snapshot).
func (v *verifier) waitCovered(ctx context.Context, t TableName, lsn uint64) (lake.Table, coverage, error) {
	start := time.Now()
	wait := v.opts.Wait
	if v.captureDown {
		wait = 0
	}
	for {
		s, cov, err := loadCovered(ctx, v.cat, v.opts.Source, t)
		if err != nil {
			return nil, cov, err
		}
		if cov.Position() >= lsn {
			return s, cov, nil
		}
		waited := time.Since(start)
		if waited > 2*time.Second && !v.nudged {
			v.nudge(ctx)
		}
		if waited >= wait {
			name := strings.Join(silverIdent(v.opts.Source, t), ".")
			if cov.BronzeCheckpoint < lsn {
				v.captureDown = true
				return nil, cov, &behindError{msg: fmt.Sprintf(
					"the source is at %s, but after waiting %s the capture has confirmed only %s and %s holds %s: "+
						"is `tidemark run` running for source %s? (verify compares at a source position and needs the pipeline to reach it; raise --wait if it is far behind)",
					v.src.FormatPosition(lsn), waited.Round(100*time.Millisecond), v.src.FormatPosition(cov.BronzeCheckpoint), name,
					v.src.FormatPosition(cov.Position()), v.opts.Source)}
			}
			return nil, cov, &behindError{msg: fmt.Sprintf(
				"bronze holds the source up to %s, but after waiting %s %s holds only %s (the source is at %s): "+
					"is the silver merge running? (`tidemark run` merges on its schedule; check its log for merge errors, or run `tidemark merge`, or raise --wait)",
				v.src.FormatPosition(cov.BronzeCheckpoint), waited.Round(100*time.Millisecond), name, v.src.FormatPosition(cov.Position()),
				v.src.FormatPosition(lsn))}
		}
		select {
		case <-ctx.Done():
			return nil, cov, ctx.Err()
		case <-time.After(v.opts.Poll):
		}
	}
}

// nudge asks the source for a commit past the position verify waits for
// (Source.Nudge), once per run.
func (v *verifier) nudge(ctx context.Context) {
	v.nudged = true
	v.src.Nudge(ctx)
}
