package silver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/bronze"
	cdc "github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
)

// Defaults of Options.
const (
	DefaultBuckets    = 16
	DefaultMaxChanges = 500_000
	DefaultMaxBytes   = 48 << 20
	DefaultEvery      = 5 * time.Second
)

// Options configure a Merger. The layout options (Buckets, DeleteMode,
// SoftDeletes) apply when a silver table is created; an existing table
// keeps its own (soft deletes: it has a cdc_deleted column; the delete
// mode: its write.delete.mode property, which an operator may change).
type Options struct {
	// Exclusive, if set, is held while one table is merged (each turn of
	// it): `tidemark run` shares one with maintenance, so a compaction and
	// a merge, each bounded by the budget, do not hold their memory at the
	// same time.
	Exclusive sync.Locker
	// Buckets is N of the partitioning bucket(N, first key column).
	// 0: DefaultBuckets; negative: unpartitioned.
	Buckets int
	// AdaptBuckets makes Buckets the most a table gets: a table is created
	// with one bucket per BucketBytes of its bronze table's data files at
	// its build (fewer than two: unpartitioned), so that the merges of a
	// small table write a few files rather than two per bucket.
	AdaptBuckets bool
	// DeleteMode is lake.MergeOnRead (position deletes; the default) or
	// lake.CopyOnWrite (rewrite the data files that hold changed rows).
	DeleteMode string
	// SoftDeletes keeps deleted rows, with cdc_deleted = true and their last
	// contents, instead of removing them.
	SoftDeletes bool
	// DropColumns deletes from silver a column the source dropped
	// (bronze.PropDroppedColumns; silver.drop_column: drop), and builds new
	// tables without it. Unset, the column stays in silver, NULL in every
	// row changed since (silver.drop_column: keep). Either way bronze keeps
	// it, and a dropped column silver lacks is not added back.
	DropColumns bool
	// MaxChanges bounds the bronze rows one commit merges (memory is a
	// budget): a longer backlog is merged in several commits, each moving
	// the cursor. 0: DefaultMaxChanges. A single bronze commit is never
	// split, so one larger than this is merged alone.
	MaxChanges int64
	// MaxBytes bounds the memory of a merge step or a build pass: it holds
	// about three times this, which bounds the bronze rows it reads (their
	// size estimated from a sample of the range's rows) with what each
	// costs beside (the silver row of its key read back, the row written,
	// the fold's and the key index's share: stepRowCopies and
	// stepRowOverhead, passRowCopies and passRowOverhead). 0:
	// DefaultMaxBytes. As with MaxChanges, a single bronze commit is never
	// split across commits: a larger one is merged in parts (parts.go).
	MaxBytes int64
	// IdleCommit > 0 skips a commit that would only move the cursor (the
	// bronze range holds no rows) when silver committed less than this long
	// ago; the next merge with rows, or the next after IdleCommit, records it.
	// 0 records every move (what `tidemark merge` wants).
	IdleCommit time.Duration
	// SpillDir is where a build in passes keeps the bronze rows of its
	// passes while it runs (read once, not once per pass); "": the system's
	// temporary directory.
	SpillDir string
	// MaxFailures is how many merges of a table in a row may fail the same
	// way before the failure is fault.ErrSilverMergeFailing.
	// 0: DefaultMaxFailures.
	MaxFailures int
	// NoAutoCompact: a silver table is not compacted by the merger when its
	// footprint passes its bounds (footprint.go); only `tidemark maintain`
	// compacts it.
	NoAutoCompact bool
	// TargetFileSize of the files the merger's compactions write. 0: the
	// table's default.
	TargetFileSize int64
	// Report, if set, is called with every table's result.
	Report func(Result)
	// Observer, if set, is told of every merge step and merge (metrics).
	Observer Observer
}

func (o Options) withDefaults() Options {
	if o.Buckets == 0 {
		o.Buckets = DefaultBuckets
	}
	if o.Buckets < 0 {
		o.Buckets = 0
	}
	if o.DeleteMode == "" {
		o.DeleteMode = lake.MergeOnRead
	}
	if o.MaxChanges <= 0 {
		o.MaxChanges = DefaultMaxChanges
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	return o
}

// Result says what one MergeTable did.
type Result struct {
	Table string `json:"table"` // silver.<source>.<schema>.<table>
	// Gated: the table's initial snapshot is not complete, so no silver
	// table exists yet; Reason says why.
	Gated  bool   `json:"gated"`
	Reason string `json:"reason,omitempty"`
	// BronzeOnly: the bronze table records no key (a source table with
	// none: bronze.Keyless), so it has no silver table and is not merged;
	// Reason says so.
	BronzeOnly bool `json:"bronze_only,omitempty"`
	// Published: this merge made the silver table visible (its initial
	// build caught up with a complete snapshot).
	Published bool `json:"published"`
	Commits   int  `json:"commits"`
	// Changes is the bronze rows read; Upserts and Deletes the silver rows
	// written and removed for them; Ignored the changes at or below the
	// silver row's position (replays) or voided by a truncate; DeadLetters
	// the changes set aside; Truncates how many merged ranges held a TRUNCATE.
	Changes     int64 `json:"changes"`
	Upserts     int64 `json:"upserts"`
	Deletes     int64 `json:"deletes"`
	Ignored     int64 `json:"ignored"`
	DeadLetters int64 `json:"dead_letters"`
	Truncates   int64 `json:"truncates"`
	// InParts is how many of the merge steps were merged in parts: one
	// bronze commit or source transaction larger than a step (parts.go).
	InParts int `json:"in_parts,omitempty"`
	// Compactions is how many times the merge compacted the table because
	// its footprint passed its bounds (footprint.go).
	Compactions int `json:"compactions,omitempty"`
	// Cursor is the bronze snapshot merged through (lake.NoSnapshot: none);
	// Position its source position (tidemark.position, the commit LSN as an
	// integer), "" if bronze recorded none.
	Cursor   int64  `json:"bronze_snapshot"`
	Position string `json:"position,omitempty"`
	// BronzeCommits is how many bronze commits the merge steps merged;
	// Backlog what was left after the last step (as of the bronze commit
	// that merge started from: turns.go).
	BronzeCommits int     `json:"bronze_commits"`
	Backlog       Backlog `json:"backlog"`
	// steps is how many merge steps (silver commits after the build) ran.
	steps int
	// visible: the silver table is published (Visible).
	visible bool
}

// Merger merges bronze tables into silver tables. Its methods may be
// called from several goroutines for different tables; two merges of the
// same table at once are safe (one of them fails its commit and changes
// nothing) but wasteful.
type Merger struct {
	cat  lake.Catalog
	opts Options
	log  *slog.Logger
	mem  memory.Allocator
	now  func() time.Time
	// wake: Wake's signal to Run (capacity 1).
	wake chan struct{}
	// rowBytes: per silver table name, the last sampled Arrow size of a
	// bronze row (float64), so small merges need no sample.
	rowBytes sync.Map
	// failed counts each table's merges that failed in a row (failing.go).
	failed failures
}

// NewMerger returns a Merger over the catalog's bronze and silver tables.
func NewMerger(cat lake.Catalog, opts Options, log *slog.Logger) *Merger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Merger{cat: cat, opts: opts.withDefaults(), log: log, mem: memory.DefaultAllocator, now: time.Now,
		wake: make(chan struct{}, 1)}
}

// MergeAll merges every bronze table of source (one at a time) and
// returns the errors of the tables that failed, joined; the others are
// merged regardless. Gated tables are not errors.
func (m *Merger) MergeAll(ctx context.Context, source string) error {
	_, err := m.mergeAll(ctx, source)
	return err
}

// MergeTables merges the named tables of source as MergeAll merges every
// table: in turns of one merge step each (turns.go), so that one table's
// large backlog does not keep the others waiting. It returns the errors of
// the tables that failed, joined; the others are merged regardless.
func (m *Merger) MergeTables(ctx context.Context, source string, tables []cdc.TableID) error {
	if len(tables) == 0 {
		return nil
	}
	_, err := m.mergeInTurns(ctx, source, tables)
	return err
}

// mergeAll is MergeAll; gated reports whether a table waits for its
// initial snapshot, or no bronze table exists yet (the capture is
// starting: its tables' snapshots are about to begin).
func (m *Merger) mergeAll(ctx context.Context, source string) (gated bool, err error) {
	tables, err := bronze.Tables(ctx, m.cat, source)
	if err != nil {
		return false, fmt.Errorf("silver: list the bronze tables of source %s: %w", source, err)
	}
	if len(tables) == 0 {
		return true, nil
	}
	return m.mergeInTurns(ctx, source, tables)
}

// MergeTable brings one silver table up to date with the bronze table as
// it is when the call starts: it merges the backlog in commits of at most
// MaxChanges bronze rows, each atomic with its cursor. It is idempotent: a
// crash at any point leaves silver at its last commit, and the next merge
// continues from there.
//
// A table whose initial snapshot is not complete is not merged (Result.
// Gated). Errors are classified (internal/fault): a fault.ErrIncompatibleSchema
// or fault.ErrCorruptState needs an operator; others may be retried.
func (m *Merger) MergeTable(ctx context.Context, source, schema, table string) (Result, error) {
	return m.mergeLogged(ctx, source, schema, table, 0, true)
}

// mergeLogged is MergeTable, in at most steps commits (0: until caught
// up; turns.go), reported to Options.Report if report is set.
func (m *Merger) mergeLogged(ctx context.Context, source, schema, table string, steps int, report bool) (Result, error) {
	if m.opts.Exclusive != nil {
		m.opts.Exclusive.Lock()
		defer m.opts.Exclusive.Unlock()
	}
	start := m.now()
	res, err := m.mergeTable(ctx, source, schema, table, steps)
	if err != nil && ctx.Err() == nil {
		err = m.noteFailure(res.Table, schema, table, fmt.Errorf("silver: merge %s: %w", res.Table, err))
	} else if err != nil {
		err = fmt.Errorf("silver: merge %s: %w", res.Table, err)
	} else {
		m.noteSuccess(res.Table)
	}
	if err != nil {
		switch {
		case ctx.Err() != nil:
		case fault.ClassOf(err) == fault.Transient:
			m.log.Warn("silver merge failed, will retry", "table", res.Table, "error", err.Error())
		default:
			m.log.Error("silver merge failed", "table", res.Table, "error", err.Error())
		}
	} else if res.Commits > 0 || res.Published {
		m.logMerged(res, m.now().Sub(start))
	}
	if m.opts.Report != nil && report {
		m.opts.Report(res)
	}
	if m.opts.Observer != nil && (err == nil || ctx.Err() == nil) {
		m.opts.Observer.Done(cdc.TableID{Schema: schema, Name: table}, res, err)
	}
	return res, err
}

func (m *Merger) mergeTable(ctx context.Context, source, schema, table string, steps int) (Result, error) {
	res := Result{Table: strings.Join(Ident(source, schema, table), "."), Cursor: lake.NoSnapshot}
	bid := append(bronze.Namespace(source, schema), table)
	b, err := m.cat.Open(ctx, bid)
	if errors.Is(err, lake.ErrNoSuchTable) {
		return res, fault.With(fault.ErrBadConfig, fmt.Sprintf("there is no bronze table %s: is %s.%s captured by pipeline %s?",
			strings.Join(bid, "."), schema, table, source), err)
	}
	if err != nil {
		return res, err
	}
	head, ok := b.CurrentSnapshot()
	if !ok {
		res.Gated, res.Reason = true, "bronze has no commit yet"
		return res, nil
	}
	if bronze.Keyless(b.Summary(), b.Properties()) {
		// Captured with no key to merge by: bronze only, and no silver
		// table until it has one (`tidemark status` says how).
		res.BronzeOnly, res.Reason = true, "the source table has no key to merge by: bronze only, no silver table"
		return res, nil
	}
	key, err := KeyOf(b)
	if err != nil {
		return res, err
	}
	s, building, err := m.openSilver(ctx, source, schema, table)
	if err != nil {
		return res, err
	}
	// A key change: built anew beside the published table (rekey.go).
	var rekeyFrom []string
	if s != nil && !building {
		was := s
		var rekey bool
		if s, rekey, err = m.rekeyed(ctx, b, s, key, source, schema, table); err != nil {
			return res, err
		}
		if rekey {
			rekeyFrom, building = keyOfTable(was), true
		}
	}
	if s == nil {
		if open, why := gate(head.Props); !open {
			res.Gated, res.Reason = true, why
			return res, nil
		}
		if s, err = m.create(ctx, buildingIdent(source, schema, table), Ident(source, schema, table), b, key); err != nil {
			return res, err
		}
		building = true
		m.log.Info("silver table build started", "table", res.Table, "bronze_snapshot", head.ID)
	}
	j := &job{m: m, b: b, s: s, key: key, source: source, table: schema + "." + table, res: &res,
		id: cdc.TableID{Schema: schema, Name: table}}
	if _, ok := s.ArrowSchema().FieldsByName(ColDeleted); ok {
		j.soft = true
	}
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		cur, err := cursorOf(j.s)
		if err != nil {
			return res, err
		}
		if cur == lake.NoSnapshot {
			// Not built yet: build it, in one commit or in passes.
			done, err := j.build(ctx, head)
			if err == nil && !done && rekeyFrom != nil {
				res.Gated, res.Reason = true, rekeyReason(head, rekeyFrom, key)
			}
			if err != nil || !done {
				return res, err
			}
			continue
		}
		res.Cursor = cur
		res.Position = j.s.Summary()[PropPosition]
		if building {
			if rekeyFrom != nil {
				if snap, err := b.Snapshot(cur); err == nil {
					if open, _ := gate(snap.Props); open {
						if err := m.dropReplaced(ctx, Ident(source, schema, table)); err != nil {
							return res, err
						}
					}
				}
			}
			if j.s, building, err = m.publish(ctx, b, j.s, cur, source, schema, table); err != nil {
				return res, err
			}
			res.Published = !building
			if !building && rekeyFrom != nil {
				m.log.Info("silver table rebuilt on its new key", "table", res.Table,
					"key_was", strings.Join(rekeyFrom, ", "), "key", strings.Join(key, ", "))
				rekeyFrom = nil
			}
		}
		res.visible = !building
		if id := resnapshotPending(head, j.s.Summary()); id != "" && !building {
			if wait, err := j.resnapshot(ctx, head, id); err != nil || wait {
				return res, err
			}
			continue
		}
		// Columns bronze gained (even without rows since), and the
		// defaults of the rows that predate them (defaults.go).
		if err := evolve(ctx, j.s, j.b, j.key, m.opts.DropColumns, m.log); err != nil {
			return res, err
		}
		if err := j.fill(ctx); err != nil {
			return res, err
		}
		if cur == head.ID {
			return res, nil
		}
		stepStart := m.now()
		hist, err := b.History(cur, head.ID)
		if err != nil {
			return res, fault.With(fault.ErrCorruptState, fmt.Sprintf(
				"silver table %s merged through bronze snapshot %d, which is no longer in bronze's history "+
					"(bronze was recreated, or its snapshots were expired before silver merged them): the changes in between "+
					"cannot be read. Run `tidemark resnapshot %s.%s` with the run flags, then `tidemark run`: silver is replaced once the table is read again "+
					"(or drop the silver table, and the next merge rebuilds it from bronze if bronze still holds its whole history)",
				res.Table, cur, schema, table), err)
		}
		to, rows, ok, err := j.step(ctx, cur, hist)
		if err != nil {
			return res, err
		}
		if !ok {
			res.Backlog = backlogOf(hist) // waits: all of it is behind
			return res, nil
		}
		if rows == 0 && m.opts.IdleCommit > 0 {
			if last, ok := j.s.CurrentSnapshot(); ok && m.now().Sub(time.UnixMilli(last.TimestampMs)) < m.opts.IdleCommit {
				res.Backlog = backlogOf(hist)
				return res, nil
			}
		}
		j.rows = rows
		j.fillFirst = true
		start := m.now()
		before := res
		j.observe = m.opts.Observer != nil && !building
		j.stepStart = stepStart
		if j.inParts(rows, j.limit) {
			// One commit or transaction larger than a step (parts.go).
			err = j.mergeInParts(ctx, cur, to, rows, j.limit, cursorProps(to))
		} else {
			err = j.merge(ctx, cur, to, part{}, true, cursorProps(to))
		}
		j.fillFirst, j.observe, j.stepStart = false, false, time.Time{}
		if errors.Is(err, errFillFirst) {
			continue
		}
		if err != nil {
			return res, err
		}
		j.observeStep(before, start)
		if !building {
			if err := j.compactIfDue(ctx); err != nil {
				return res, err
			}
		}
		if j.stepDone(hist, to, start) >= steps && steps > 0 {
			return res, nil // a turn's share (turns.go); res.More says what is left
		}
	}
}

// job is the merge of one table.
type job struct {
	m      *Merger
	b      lake.Table
	s      lake.KeyedTable
	key    []string
	soft   bool
	source string
	table  string // schema.table, for the dead letters
	res    *Result
	// replace: the commit deletes every silver row first (a re-snapshot,
	// resnapshot.go).
	replace bool
	// fillFirst: a merge that finds a default fill pending on a
	// copy-on-write table returns errFillFirst (defaults.go).
	fillFirst bool
	// rowBytes is the Arrow size of one bronze row, sampled once per job
	// (0: not yet).
	rowBytes float64
	// rows is about how many bronze rows the next merge reads (0: unknown),
	// to size its key index once.
	rows int64
	// limit is the bronze rows a merge step may hold (maxRows), as of the
	// last step picked: a step of more is merged in parts (parts.go).
	limit int64
	// id is the source table; observe: the next merge collects the
	// transactions it reads into txs, for Options.Observer (observe.go).
	id      cdc.TableID
	observe bool
	txs     *txTimes
	// stepStart: the next merge is a merge step that started then; its
	// commit records it with the changes it read (PropStepStarted).
	stepStart time.Time
}

// What a merge step holds per bronze row it reads, beside the row's Arrow
// data (stepRowCopies copies: the bronze row, and the silver row of its key
// read back, or the row written): stepRowOverhead, the touched key's share
// of the fold and of the silver read-back (its key index entry and change,
// its slots in the key order and the output, the rows the scan of silver
// found for it and their positions, the key values of the rows read
// whole). Measured on a backlog of 1M updates of a 1M-row table (84 B of
// bronze Arrow per row): a step sized at MaxBytes of bronze rows
// (~200k rows) held ~170 MB of live heap, ~800 B per row, and took
// `tidemark merge` to 393 MiB RSS under a 256 MiB budget.
const (
	stepRowCopies   = 2
	stepRowOverhead = 640
)

// maxRows is how many bronze rows one merge step may read: MaxChanges, or
// fewer when what a step holds for them (stepRowCopies, stepRowOverhead)
// would exceed three times MaxBytes (what a merge of MaxBytes of bronze
// rows is budgeted to hold). rows is the size of the range (after, to].
// The row size is sampled from the range, unless the last sample of the
// table says the range is far below the budget.
func (j *job) maxRows(ctx context.Context, after, to int64, rows int64) (int64, error) {
	lim := j.m.opts.MaxChanges
	if rows <= 1 {
		return lim, nil
	}
	if j.rowBytes == 0 {
		if rb, ok := j.m.rowBytes.Load(j.res.Table); ok && rows <= j.stepRows(rb.(float64))/4 {
			return lim, nil
		}
		if err := j.sampleRowBytes(ctx, after, to); err != nil {
			return 0, err
		}
	}
	return j.stepRows(j.rowBytes), nil
}

// stepRows is maxRows for bronze rows of rb bytes of Arrow each.
func (j *job) stepRows(rb float64) int64 {
	return max(1, min(j.m.opts.MaxChanges, int64(3*float64(j.m.opts.MaxBytes)/(stepRowCopies*rb+stepRowOverhead))))
}

// sampleRowBytes sets j.rowBytes from a sample of the bronze range
// (after, to], and remembers it for the table's next merges.
func (j *job) sampleRowBytes(ctx context.Context, after, to int64) error {
	rb, err := j.b.AppendedRowBytes(ctx, after, to)
	if err != nil {
		return err
	}
	j.rowBytes = max(rb, 1)
	j.m.rowBytes.Store(j.res.Table, j.rowBytes)
	j.m.log.Debug("silver sampled bronze row size", "table", j.res.Table, "bytes_per_row", int64(rb))
	return nil
}

// cursorProps are the summary keys of a commit that merged through to.
func cursorProps(to lake.Snapshot) map[string]string {
	props := map[string]string{PropBronzeSnapshot: strconv.FormatInt(to.ID, 10)}
	for _, k := range []string{PropPosition, PropWatermark, PropResnapshot} {
		if v := to.Props[k]; v != "" {
			props[k] = v
		}
	}
	return props
}

// complete reports whether the bronze range (after, to] ends on a
// transaction boundary: bronze may commit a large transaction in several
// flushes, and a merge that stopped inside one would show half of it. The
// range is complete when no row in it is above to's tidemark.position (the
// commit LSN of the last transaction bronze holds entirely). It reads only
// file statistics. rows is the range's row count.
func (j *job) complete(ctx context.Context, after int64, to lake.Snapshot) (rows int64, ok bool, err error) {
	n, maxLSN, known, err := j.b.AppendedBounds(ctx, after, to.ID, ColLSN)
	if err != nil {
		return 0, false, err
	}
	if n == 0 {
		return 0, true, nil
	}
	if !known {
		// Without statistics the boundary cannot be checked; waiting would
		// stall silver for good. Merge, and say so.
		j.m.log.Warn("bronze data files carry no statistics for "+ColLSN+": silver cannot check that a merge ends on a transaction boundary",
			"table", j.res.Table)
		return n, true, nil
	}
	p, perr := strconv.ParseUint(to.Props[PropPosition], 10, 64)
	if perr != nil {
		return n, false, nil // no position yet: the next bronze commit records one
	}
	return n, uint64(maxLSN) <= p, nil
}

// step picks how far the next commit merges along hist (the bronze
// snapshots after the cursor, oldest first): as many snapshots as fit in
// MaxChanges rows (at least one), moved to the nearest snapshot that ends
// on a transaction boundary, later ones first. ok is false when no
// snapshot in hist does (a large transaction is still being written).
func (j *job) step(ctx context.Context, cur int64, hist []lake.Snapshot) (to lake.Snapshot, rows int64, ok bool, err error) {
	var total int64
	for _, h := range hist {
		if h.Operation == "append" {
			total += h.AddedRecords
		}
	}
	limit, err := j.maxRows(ctx, cur, hist[len(hist)-1].ID, total)
	if err != nil {
		return to, 0, false, err
	}
	j.limit = limit
	var sum int64
	budget := 0
	for i, h := range hist {
		add := int64(0)
		if h.Operation == "append" {
			add = h.AddedRecords
		}
		if i > 0 && sum+add > limit {
			break
		}
		sum += add
		budget = i
	}
	order := make([]int, 0, len(hist))
	for i := budget; i < len(hist); i++ {
		order = append(order, i)
	}
	for i := budget - 1; i >= 0; i-- {
		order = append(order, i)
	}
	for _, i := range order {
		n, complete, err := j.complete(ctx, cur, hist[i])
		if err != nil {
			return to, 0, false, err
		}
		if complete {
			return hist[i], n, true, nil
		}
	}
	j.m.log.Debug("silver waits for a transaction bronze holds only in part", "table", j.res.Table)
	return to, 0, false, nil
}

// Build progress, in the summary of a table being built in passes.
const (
	propBuildTarget = "tidemark.build-target" // the bronze snapshot the build merges through
	propBuildPasses = "tidemark.build-passes"
	propBuildPass   = "tidemark.build-pass" // the last pass committed, from 0
	// propBuildRoute is buildRouteChains when the passes route the keys of
	// a key-change chain together (scanChains), buildRouteBuckets when they
	// also route by the silver table's bucket (bucketRoute).
	propBuildRoute    = "tidemark.build-route"
	buildRouteChains  = "chains"
	buildRouteBuckets = "buckets"
)

// build merges bronze from its first snapshot into the new table. Until
// its initial snapshot is complete, bronze's order is not the source's:
// a snapshot chunk's rows are positioned at its low watermark, but they
// are written after the changes made while the chunk was read. So the
// whole range up to a complete snapshot is folded at once, never split
// across commits by snapshot. When it holds more than MaxChanges rows, or
// more than a pass may hold in memory (passRows), it is split by key
// instead: pass i of n folds the keys of its buckets of the silver table
// (bucketRoute; without a bucket partition, the keys whose hash is i
// modulo n), the keys of a chain of key-changing UPDATEs with the chain's
// key of smallest hash (scanChains), and commits them (to the table being built, which no
// one reads). The range is read once, into a spill of the passes' rows.
// The last pass records the cursor. Progress is in the summary, so a crash resumes with the next
// pass. done is false when there is nothing to build from yet.
func (j *job) build(ctx context.Context, head lake.Snapshot) (done bool, err error) {
	sum := j.s.Summary()
	var target lake.Snapshot
	var from int64 // the build reads bronze after it (buildFrom)
	passes, next := 0, 0
	chained := false
	var byBucket *bucketRoute
	if sum != nil && sum[propBuildTarget] != "" {
		id, err1 := strconv.ParseInt(sum[propBuildTarget], 10, 64)
		n, err2 := strconv.Atoi(sum[propBuildPasses])
		last, err3 := strconv.Atoi(sum[propBuildPass])
		if err := errors.Join(err1, err2, err3); err != nil {
			return false, fault.With(fault.ErrCorruptState, fmt.Sprintf("silver table %s: unreadable build progress", j.res.Table), err)
		}
		if target, err = j.b.Snapshot(id); err != nil {
			return false, err
		}
		if from, err = buildFrom(j.b, target); err != nil {
			return false, err
		}
		passes, next = n, last+1
		switch sum[propBuildRoute] {
		case buildRouteChains:
			chained = true
		case buildRouteBuckets:
			chained = true
			if byBucket = newBucketRoute(j.s, j.key); byBucket == nil {
				return false, fault.With(fault.ErrCorruptState, fmt.Sprintf(
					"silver table %s: its build routes its passes by bucket, but the table is not partitioned by a bucket of its key", j.res.Table), nil)
			}
		}
	} else {
		if from, err = buildFrom(j.b, head); err != nil {
			return false, err
		}
		hist, err := j.b.History(from, head.ID)
		if err != nil {
			return false, err
		}
		var rows int64
		found := false
		for i := len(hist) - 1; i >= 0 && !found; i-- {
			if open, _ := gate(hist[i].Props); !open {
				break
			}
			n, complete, err := j.complete(ctx, from, hist[i])
			if err != nil {
				return false, err
			}
			if complete {
				target, rows, found = hist[i], n, true
			}
		}
		if !found {
			return false, nil
		}
		limit, err := j.passRows(ctx, from, target.ID, rows)
		if err != nil {
			return false, err
		}
		passes = int((rows + limit - 1) / limit)
		passes = max(passes, 1)
		chained = true
		if passes > 1 {
			// Passes of whole buckets: each pass writes one data file per
			// bucket it covers, not one per bucket of the table.
			if byBucket = newBucketRoute(j.s, j.key); byBucket != nil {
				passes = bucketPasses(passes, byBucket.b.Buckets())
			}
		}
		j.rows = rows / int64(passes)
		if passes > 1 {
			j.rows += j.rows / 8 // keys do not hash evenly
			j.m.log.Info("silver table build in passes", "table", j.res.Table, "bronze_rows", rows, "passes", passes,
				"bytes_per_row", int64(j.rowBytes), "by_bucket", byBucket != nil)
		}
	}
	// A pass holds the keys of one hash class, but a key-changing UPDATE
	// whose new row takes its unchanged TOAST columns from the old key's row
	// needs both keys in one fold: the keys of such chains go to one pass.
	// (A build started by a version that did not route chains resumes
	// without: its committed passes were routed by key hash alone.)
	var chains map[uint64]chainRoute
	if passes > 1 && chained {
		if chains, err = scanChains(ctx, j.b, j.key, byBucket, from, target.ID); err != nil {
			return false, err
		}
	}
	// Read the range once for the passes left, not once per pass (spill.go).
	var sp *spill
	if passes-next > 1 {
		start := time.Now()
		sp, err = spillPasses(ctx, j.m.mem, j.m.opts.SpillDir, j.b, j.key, from, target.ID,
			part{i: next, n: passes, chains: chains, buckets: byBucket})
		if err == nil {
			j.m.log.Info("silver table build read bronze", "table", j.res.Table, "passes", passes-next, "dir", sp.dir,
				"took", time.Since(start).Round(time.Millisecond).String())
		}
		if err != nil {
			if ctx.Err() != nil {
				return false, err
			}
			// The spill is an optimization: without room for it, each pass
			// reads bronze itself.
			j.m.log.Warn("silver build could not spill its passes; each pass reads bronze", "table", j.res.Table, "error", err.Error())
			sp = nil
		}
		defer sp.remove()
	}
	prog := newBuildProgress(j, passes, next)
	for p := next; p < passes; p++ {
		props := map[string]string{
			propBuildTarget: strconv.FormatInt(target.ID, 10),
			propBuildPasses: strconv.Itoa(passes),
			propBuildPass:   strconv.Itoa(p),
		}
		switch {
		case byBucket != nil:
			props[propBuildRoute] = buildRouteBuckets
		case chained:
			props[propBuildRoute] = buildRouteChains
		}
		if p == passes-1 {
			for k, v := range cursorProps(target) {
				props[k] = v
			}
		}
		// A pass's keys are in no other pass, and a crashed pass left nothing:
		// there are no silver rows to read back.
		if err := j.merge(ctx, from, target, part{i: p, n: passes, chains: chains, buckets: byBucket, spill: sp}, false, props); err != nil {
			return false, err
		}
		prog.passDone(p)
	}
	return true, nil
}

// buildProgress logs a build's progress, pass by pass.
type buildProgress struct {
	j            *job
	passes, from int
	start        time.Time
	changes0     int64 // j.res.Changes when the passes started
}

func newBuildProgress(j *job, passes, next int) *buildProgress {
	return &buildProgress{j: j, passes: passes, from: next, start: time.Now(), changes0: j.res.Changes}
}

// passDone logs that pass p (from 0) is committed: the rows folded so
// far, their rate and the time the passes left should take at that rate.
func (b *buildProgress) passDone(p int) {
	if b.passes <= 1 {
		return
	}
	took := time.Since(b.start)
	rows := b.j.res.Changes - b.changes0
	done := p + 1 - b.from
	left := b.passes - p - 1
	rate := float64(rows) / max(took.Seconds(), 1e-3)
	eta := time.Duration(float64(took) / float64(done) * float64(left))
	b.j.m.log.Info("silver table build progress", "table", b.j.res.Table, "pass", p+1, "passes", b.passes,
		"rows", rows, "rows_per_sec", int64(rate), "eta", eta.Round(time.Second).String())
}

// What a build pass holds per bronze row: the row's Arrow data twice (the
// rows read, and the rows written: gathered in key order, a copy) and
// passRowOverhead beside them (its key index entry, its change, its slots
// in the key order and the output). Measured: a heap profile of a pass of
// 125k pgbench_accounts rows (150 B of Arrow each) held ~50 MB, ~400 B per
// row; a pass of 1 KB rows sized at one copy plus 250 B took a 256 MiB
// process to 271 MiB.
const (
	passRowCopies   = 2
	passRowOverhead = 100
)

// passRows is how many bronze rows one build pass may fold: MaxChanges,
// or fewer when the memory a pass holds (passRowCopies, passRowOverhead)
// would exceed three times MaxBytes (what a merge of MaxBytes of rows is
// budgeted to hold: the rows read, the rows written, the writer's buffers).
func (j *job) passRows(ctx context.Context, after, to int64, rows int64) (int64, error) {
	lim := j.m.opts.MaxChanges
	if rows <= 1 {
		return lim, nil
	}
	if j.rowBytes == 0 {
		if err := j.sampleRowBytes(ctx, after, to); err != nil {
			return 0, err
		}
	}
	return max(1, min(lim, int64(3*float64(j.m.opts.MaxBytes)/(passRowCopies*j.rowBytes+passRowOverhead)))), nil
}

// openSilver loads the published silver table, else the one being built;
// nil if neither exists.
func (m *Merger) openSilver(ctx context.Context, source, schema, table string) (lake.KeyedTable, bool, error) {
	s, err := m.cat.Open(ctx, Ident(source, schema, table))
	if err == nil {
		return s, false, nil
	}
	if !errors.Is(err, lake.ErrNoSuchTable) {
		return nil, false, err
	}
	s, err = m.cat.Open(ctx, buildingIdent(source, schema, table))
	if err == nil {
		return s, true, nil
	}
	if !errors.Is(err, lake.ErrNoSuchTable) {
		return nil, false, err
	}
	return nil, false, nil
}

// create creates a silver table for bronze table b, as ident, its files
// where a table named placeAs keeps them (a build is renamed to that name
// when published: its files are under the name readers see).
func (m *Merger) create(ctx context.Context, ident, placeAs []string, b lake.Table, key []string) (lake.KeyedTable, error) {
	keyJSON, err := json.Marshal(key)
	if err != nil {
		return nil, err
	}
	props := map[string]string{bronze.PropKey: string(keyJSON)}
	if ids := b.Properties()[bronze.PropColumnIDs]; ids != "" {
		props[bronze.PropColumnIDs] = ids
	}
	buckets := m.opts.Buckets
	if mt, ok := b.(lake.Maintained); ok && m.opts.AdaptBuckets && buckets > 1 {
		fp, err := mt.Footprint(ctx)
		if err != nil {
			return nil, err
		}
		buckets = AdaptedBuckets(fp.DataBytes, buckets)
	}
	var omit []string
	if m.opts.DropColumns {
		var err error
		if omit, err = droppedOf(b); err != nil {
			return nil, err
		}
	}
	s, err := m.cat.Create(ctx, ident, lake.TableSpec{
		Schema:     schemaFor(b.ArrowSchema(), key, m.opts.SoftDeletes, omit),
		Key:        key,
		Buckets:    buckets,
		DeleteMode: m.opts.DeleteMode,
		Properties: props,
		PlaceAs:    placeAs,
	})
	if errors.Is(err, lake.ErrTableExists) {
		s, err = m.cat.Open(ctx, ident)
	}
	return s, err
}

// publish renames a table being built to its silver name once it has
// merged through a bronze snapshot whose initial snapshot is complete.
func (m *Merger) publish(ctx context.Context, b lake.Table, s lake.KeyedTable, cur int64, source, schema, table string) (lake.KeyedTable, bool, error) {
	if cur == lake.NoSnapshot {
		return s, true, nil
	}
	snap, err := b.Snapshot(cur)
	if err != nil {
		return s, true, err
	}
	if open, _ := gate(snap.Props); !open {
		return s, true, nil
	}
	failpoint.Inject("silver-before-publish")
	to := Ident(source, schema, table)
	p, err := m.cat.Rename(ctx, s.Ident(), to)
	if errors.Is(err, lake.ErrNoSuchTable) || errors.Is(err, lake.ErrTableExists) {
		// Another writer (`tidemark merge` beside a running pipeline)
		// published the table first: a lost race, redone on the published
		// table by the caller's retry.
		return s, true, fault.With(fault.ErrCommitConflict, fmt.Sprintf(
			"silver table %s was published by another writer while this one built it", strings.Join(to, ".")), err)
	}
	if err != nil {
		return s, true, err
	}
	m.log.Info("silver table published", "table", strings.Join(p.Ident(), "."), "bronze_snapshot", cur)
	return p, false, nil
}

// cursorOf reads silver's cursor: the bronze snapshot its current snapshot
// merged through (lake.NoSnapshot for a table with no commit yet, or a
// build's pass that was not its last).
func cursorOf(s lake.KeyedTable) (int64, error) {
	sum := s.Summary()
	if sum == nil {
		return lake.NoSnapshot, nil
	}
	raw, ok := sum[PropBronzeSnapshot]
	if !ok && sum[propBuildTarget] != "" {
		// A build in passes, interrupted: no cursor yet (build resumes it).
		return lake.NoSnapshot, nil
	}
	if !ok {
		return 0, fault.With(fault.ErrCorruptState, fmt.Sprintf(
			"silver table %s: its current snapshot has no %s (was it written by something other than tidemark?): "+
				"silver cannot know which bronze changes it holds. Rebuild it: drop it, and the next merge rebuilds it from bronze",
			strings.Join(s.Ident(), "."), PropBronzeSnapshot), nil)
	}
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, fault.With(fault.ErrCorruptState, fmt.Sprintf("silver table %s: unreadable %s %q",
			strings.Join(s.Ident(), "."), PropBronzeSnapshot, raw), err)
	}
	return id, nil
}

// merge merges the bronze rows appended after snapshot `after` up to
// snapshot to (only part p's keys) into the silver table, in one commit
// carrying props. priors: read back the silver rows of the touched keys.
func (j *job) merge(ctx context.Context, after int64, to lake.Snapshot, p part, priors bool, props map[string]string) error {
	m, s := j.m, j.s
	if err := evolve(ctx, s, j.b, j.key, m.opts.DropColumns, m.log); err != nil {
		return err
	}
	if j.fillFirst && !s.MergeOnRead() && len(fillPending(s)) > 0 {
		// A copy-on-write commit would rewrite files without the new
		// column with their other rows, which the fill would then miss.
		return errFillFirst
	}
	var txs *txTimes
	if j.observe {
		txs = &txTimes{}
	}
	f, err := j.fold(ctx, after, to, p, priors, txs)
	if err != nil {
		return err
	}
	defer f.release()
	props = j.stepProps(props, f.st.Changes)
	t3 := m.now()
	if f.live != nil {
		err = s.MergeRows(ctx, f.live, f.byPos, f.del, f.recs, props)
	} else {
		err = s.Merge(ctx, f.del, f.recs, props)
	}
	if err != nil {
		if errors.Is(err, lake.ErrCommitConflict) {
			return fault.MarkTransient(err)
		}
		return err
	}
	m.log.Debug("silver commit", "table", strings.Join(s.Ident(), "."), "bronze_snapshot", to.ID, "pass", p.i,
		"changes", f.st.Changes, "upserts", f.st.Upserts, "deletes", f.st.Deletes, "rewritten", f.rewritten,
		"read_bronze", f.readBronze.Round(time.Millisecond).String(), "read_silver", f.readSilver.Round(time.Millisecond).String(),
		"fold", f.folding.Round(time.Millisecond).String(), "write", m.now().Sub(t3).Round(time.Millisecond).String())
	if txs != nil {
		j.txs = txs
	}
	j.count(f.st)
	return nil
}

// stepProps adds to the props of a merge step's commit the changes it
// read and when it started (PropStepChanges, PropStepStarted); props as
// they are for other commits.
func (j *job) stepProps(props map[string]string, changes int64) map[string]string {
	if j.stepStart.IsZero() {
		return props
	}
	props = maps.Clone(props)
	props[PropStepChanges] = strconv.FormatInt(changes, 10)
	props[PropStepStarted] = strconv.FormatInt(j.stepStart.UnixMilli(), 10)
	return props
}

// count adds what a commit merged to the job's result.
func (j *job) count(st Result) {
	r := j.res
	r.Commits++
	r.Changes += st.Changes
	r.Upserts += st.Upserts
	r.Deletes += st.Deletes
	r.Ignored += st.Ignored
	r.DeadLetters += st.DeadLetters
	r.Truncates += st.Truncates
}

// folded is what the fold of (a part of) a merge writes: the silver rows
// it deletes by position (byPos, found by the scan live; nil live: the
// table is copy-on-write, or had nothing to read back), the rows del
// matches, and the rows recs it appends. release frees it.
type folded struct {
	in    *input
	st    Result
	live  lake.LiveRows
	byPos []lake.RowID
	del   *lake.Filter
	// byKey: del selects rows by key (copy-on-write), not only those
	// below a truncate.
	byKey     bool
	recs      []arrow.RecordBatch
	rewritten int // rows written back unchanged
	// the time spent reading bronze, reading silver, folding
	readBronze, readSilver, folding time.Duration
}

func (f *folded) release() {
	for _, r := range f.recs {
		r.Release()
	}
	f.recs = nil
	f.in.release()
}

// fold reads the bronze rows appended after snapshot `after` up to
// snapshot to (only part p's keys) and, with priors, the silver rows of
// the keys they touch, folds each key's changes and returns what the
// commit writes; it writes the changes it sets aside to the dead-letter
// table. txs, if set, collects the transactions read (observe.go).
func (j *job) fold(ctx context.Context, after int64, to lake.Snapshot, p part, priors bool, txs *txTimes) (_ *folded, err error) {
	m, s := j.m, j.s
	var st Result
	var srcCols []string
	for _, f := range s.ArrowSchema().Fields() {
		if !strings.HasPrefix(f.Name, "cdc_") {
			srcCols = append(srcCols, f.Name)
		}
	}
	in := newInput(j.key, srcCols)
	in.filterVals = priors
	in.txs = txs
	in.reserve(int(j.rows))
	out := &folded{in: in}
	defer func() {
		if err != nil {
			out.release()
		}
	}()
	t0 := m.now()
	if err := in.readBronze(ctx, m.mem, j.b, after, to.ID, p); err != nil {
		return nil, err
	}
	st.Changes = int64(in.bronze)
	t1 := m.now()
	if priors {
		if err := in.readSilver(ctx, s, j.soft); err != nil {
			return nil, err
		}
	}
	t2 := m.now()
	in.keyChanges(j.soft)
	// Fold every touched key, in key order (the table's sort order).
	order := in.sorted()
	rows := make([]outRow, 0, len(order))
	rowKeys := make([]string, 0, len(order)) // rows[i]'s key, to write rows in key order
	rewrite := false                         // some key's row changes: delete the rows read, write back the others
	var kept []keyRef
	for _, ki := range order {
		kd := &in.keys.all[ki]
		k := kd.enc
		o := fold(kd.prior, kd.changes, in.trunc, j.soft)
		st.Ignored += int64(o.ignored)
		for _, h := range o.holes {
			cols := make([]string, len(h.cols))
			for i, c := range h.cols {
				cols[i] = srcCols[c]
			}
			in.dead = append(in.dead, deadRow{ref: kd.changes[h.change].ref, reason: fmt.Sprintf(
				"column(s) %s were left unchanged by the source (TOAST) and no earlier state of the row is known "+
					"(not in this merge, not in silver): the row was not merged, silver keeps its previous state",
				strings.Join(cols, ", "))})
		}
		live := kd.prior != nil && (in.trunc == nil || in.trunc.less(kd.prior.pos))
		kd.changed = o.act != keep
		switch o.act {
		case put:
			rewrite = true
			rows = append(rows, outRow{base: o.base, meta: o.meta, fill: o.fill, deleted: o.deleted})
			rowKeys = append(rowKeys, k)
			st.Upserts++
		case drop:
			rewrite = rewrite || live
			if live {
				st.Deletes++
			}
		case keep:
			if live {
				kept = append(kept, keyRef{k, kd.prior.ref})
			}
		}
	}
	var del *lake.Filter
	var byPos []lake.RowID // merge-on-read: the silver rows deleted
	if in.live != nil {
		var err error
		if byPos, rows, rowKeys, err = in.deletedRows(rows, rowKeys, kept, j.soft); err != nil {
			return nil, err
		}
	} else if rewrite && in.total > in.bronze {
		// The rows read back are deleted; those that stay are written back.
		del, out.byKey = in.filter(), true
		for _, kr := range append(kept, in.extras...) {
			if in.trunc != nil && !in.trunc.less(in.posOf(kr.ref)) {
				continue
			}
			rows = append(rows, in.copyRow(kr.ref, j.soft))
			rowKeys = append(rowKeys, kr.key)
		}
		sortByKey(rows, rowKeys)
	}
	if in.trunc != nil {
		st.Truncates++
		before := lake.Or(lake.Less(ColLSN, in.trunc.lsn),
			lake.And(lake.Equal(ColLSN, in.trunc.lsn), lake.Less(ColSeq, in.trunc.seq)))
		if del == nil {
			del = before
		} else {
			del = lake.Or(del, before)
		}
	}
	if j.replace {
		del, out.byKey = everyRow(), true
	}

	if len(in.dead) > 0 {
		dl, err := openDeadLetter(ctx, m.cat, j.source)
		if err != nil {
			return nil, err
		}
		n, err := in.writeDeadLetters(ctx, m.mem, dl, j.table, to.ID, m.now())
		if err != nil {
			return nil, fmt.Errorf("write dead letters: %w", err)
		}
		st.DeadLetters = int64(len(in.dead))
		if n > 0 {
			m.log.Warn("changes sent to the silver dead-letter table", "table", j.res.Table, "count", n,
				"dead_letter_table", strings.Join(DeadLetterIdent(j.source), "."), "first_error", in.dead[0].reason)
		}
	}

	if len(rows) > 0 {
		built, err := in.build(ctx, m.mem, s.ArrowSchema(), rows)
		if err != nil {
			return nil, fmt.Errorf("assemble %d rows: %w", len(rows), err)
		}
		out.recs = built
	}
	out.st, out.live, out.byPos, out.del = st, in.live, byPos, del
	out.rewritten = len(rows) - int(st.Upserts)
	out.readBronze, out.readSilver, out.folding = t1.Sub(t0), t2.Sub(t1), m.now().Sub(t2)
	return out, nil
}

// keyChanges gives the insert half of a key change the TOAST-unchanged
// values it lacks. PostgreSQL writes an UPDATE that changes the key as a
// delete of the old key and an insert of the new one at the next seq; the
// insert lists the TOAST columns it did not send, whose values are those
// of the row the delete removed (docs/bronze.md, "Key changes"). Resolved
// in position order, so a chain of key changes carries the values along.
func (in *input) keyChanges(soft bool) {
	in.group()
	if in.keyChangeInserts == 0 {
		return
	}
	type at struct{ key, i int32 } // change i of key
	dels := map[pos]int32{}
	var ins []at
	for k := range in.keys.all {
		for i, c := range in.keys.all[k].changes {
			switch {
			case c.op == opDelete:
				dels[c.pos] = int32(k)
			case c.op == opInsert && len(c.unchanged) > 0:
				ins = append(ins, at{int32(k), int32(i)})
			}
		}
	}
	chg := func(x at) *change { return &in.keys.all[x.key].changes[x.i] }
	slices.SortFunc(ins, func(a, b at) int {
		pa, pb := chg(a).pos, chg(b).pos
		switch {
		case pa.less(pb):
			return -1
		case pb.less(pa):
			return 1
		}
		return 0
	})
	for _, x := range ins {
		c := chg(x)
		dpos := pos{c.pos.lsn, c.pos.seq - 1}
		old, ok := dels[dpos]
		if !ok {
			continue // no delete half in the range: the columns stay holes
		}
		od := &in.keys.all[old]
		var before []change
		for _, oc := range od.changes {
			if oc.pos.less(dpos) {
				before = append(before, oc)
			}
		}
		st := foldState(od.prior, before, in.trunc, soft)
		if !st.present {
			continue
		}
		for _, col := range c.unchanged {
			if _, hole := st.holes[col]; hole {
				continue
			}
			if c.from == nil {
				c.from = map[int]int{}
			}
			c.from[col] = st.source(col)
		}
	}
}

// posOf returns the position of an input row.
func (in *input) posOf(ref int) pos {
	b, i := in.locate(ref)
	var p pos
	if a, ok := column(b, ColLSN).(interface{ Value(int) int64 }); ok {
		p.lsn = a.Value(i)
	}
	if a, ok := column(b, ColSeq).(interface{ Value(int) int64 }); ok {
		p.seq = a.Value(i)
	}
	return p
}

// copyRow writes a silver row back as it is.
func (in *input) copyRow(ref int, soft bool) outRow {
	r := outRow{base: ref, meta: ref}
	if soft {
		b, i := in.locate(ref)
		if a, ok := column(b, ColDeleted).(interface {
			Value(int) bool
			IsNull(int) bool
		}); ok && !a.IsNull(i) {
			r.deleted = a.Value(i)
		}
	}
	return r
}

// sortByKey sorts rows by their keys (the table's sort order).
func sortByKey(rows []outRow, keys []string) {
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	out := make([]outRow, len(rows))
	for i, j := range idx {
		out[i] = rows[j]
	}
	copy(rows, out)
}
