// Package maintain keeps a pipeline's lake tables close to their live
// data: it compacts small data files and folds position deletes into the
// data, expires old snapshots, and removes orphan files, for bronze and
// silver alike (`tidemark maintain`, and periodically inside `tidemark run`).
//
// # What it never breaks
//
//   - Writer state. Bronze and silver read their cursors from the current
//     snapshot's summary (tidemark.cursor, tidemark.position,
//     tidemark.snapshot, tidemark.bronze-snapshot, ...). A compaction
//     snapshot carries every tidemark.* key of the snapshot it replaces,
//     and is a compare-and-swap on the table's head, re-applied on a newer
//     head only when everything committed meanwhile was an append (bronze
//     keeps writing); a delete meanwhile (a silver merge) cancels it. Expiry
//     commits metadata only and never removes the current snapshot.
//   - Silver's incremental merge. Silver reads bronze from its cursor
//     (tidemark.bronze-snapshot) on; a first build reads bronze from its
//     first snapshot. So a bronze table keeps every snapshot from the
//     oldest silver cursor of that table on, and expires nothing while its
//     silver table does not exist yet or is being built.
//   - Writes in flight. A file is an orphan only when no metadata of the
//     table references it and it is older than OrphanAge (default a day,
//     longer than any write between writing its files and committing them).
//
// All operations are idempotent: a crash in the middle leaves files that
// the next run's orphan removal collects (once they are OrphanAge old).
package maintain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/silver"
)

// Defaults of Options.
const (
	DefaultOlderThan  = time.Hour
	DefaultRetainLast = 10
	DefaultOrphanAge  = 24 * time.Hour
	// DefaultTargetFileSize is the size compaction aims for.
	DefaultTargetFileSize = 128 << 20
	// DefaultEvery is the period of maintenance inside `tidemark run`.
	DefaultEvery = 10 * time.Minute
	// DefaultCheckEvery is how often Loop measures the append-only tables
	// between runs (Check), compacting those past their bound.
	DefaultCheckEvery = 30 * time.Second
	// BronzeCompactFiles: an append-only table (bronze, the checkpoint
	// and dead-letter tables) with this many data files more than its last
	// compaction left is compacted at the next check. Bronze writes a file
	// per table per commit (one every --commit-interval while changes
	// flow): between checks its files grow by the commits of one period.
	BronzeCompactFiles = 32
)

// Options configure a Maintainer.
type Options struct {
	// OlderThan: snapshots younger than this are kept. 0: DefaultOlderThan.
	OlderThan time.Duration
	// RetainLast: the newest N snapshots of each table are kept whatever
	// their age. 0: DefaultRetainLast.
	RetainLast int
	// OrphanAge: unreferenced files younger than this are left alone (they
	// may belong to a commit in progress). 0: DefaultOrphanAge; it cannot be
	// below an hour.
	OrphanAge time.Duration
	// TargetFileSize for compaction output. 0: DefaultTargetFileSize.
	TargetFileSize int64
	// NoCompact, NoExpire, NoOrphans skip a step.
	NoCompact, NoExpire, NoOrphans bool
	// WithoutSilver: the pipeline does not use silver, so bronze expiry is
	// not held back by silver cursors (or by a silver table not built yet).
	WithoutSilver bool
	// DryRun reports what would be done and changes nothing.
	DryRun bool
	// OnRun, if set, is told the outcome of each run of Loop (nil: it
	// succeeded), for metrics. Called on Loop's goroutine; must not block.
	OnRun func(err error)
	// Exclusive, if set, is held while one table is maintained (or
	// checked and compacted): `tidemark run` shares one with silver's
	// merger, so their memory peaks do not add up.
	Exclusive sync.Locker
}

// exclusive takes opts.Exclusive, if set; the returned func releases it.
func (m *Maintainer) exclusive() func() {
	if m.opts.Exclusive == nil {
		return func() {}
	}
	m.opts.Exclusive.Lock()
	return m.opts.Exclusive.Unlock
}

// MinOrphanAge is the least OrphanAge accepted.
const MinOrphanAge = time.Hour

func (o Options) withDefaults() Options {
	if o.OlderThan <= 0 {
		o.OlderThan = DefaultOlderThan
	}
	if o.RetainLast <= 0 {
		o.RetainLast = DefaultRetainLast
	}
	if o.OrphanAge <= 0 {
		o.OrphanAge = DefaultOrphanAge
	}
	if o.TargetFileSize <= 0 {
		o.TargetFileSize = DefaultTargetFileSize
	}
	return o
}

// Validate checks the options a user gives.
func (o Options) Validate() error {
	if o.OrphanAge != 0 && o.OrphanAge < MinOrphanAge {
		return fmt.Errorf("orphan age %s is below %s: files of a commit in progress could be removed", o.OrphanAge, MinOrphanAge)
	}
	if o.OlderThan < 0 || o.RetainLast < 0 {
		return errors.New("older-than and retain-last must not be negative")
	}
	return nil
}

// Result says what maintenance did to one table.
type Result struct {
	Table   string             `json:"table"`
	Before  lake.Footprint     `json:"before"`
	After   lake.Footprint     `json:"after"`
	Compact lake.CompactResult `json:"compact"`
	// Expired is the number of snapshots expired; KeptFrom the snapshot
	// from which all were kept for silver (0: none), with the reason.
	Expired      int    `json:"expired_snapshots"`
	KeptFrom     int64  `json:"kept_from_snapshot,omitempty"`
	ExpireNote   string `json:"expire_note,omitempty"`
	Orphans      int    `json:"orphan_files"`
	OrphanBytes  int64  `json:"orphan_bytes"`
	CompactError string `json:"compact_error,omitempty"` // a compaction that lost to a concurrent merge
}

// Maintainer runs maintenance over a catalog. Safe for concurrent use,
// though two runs on one table at once only waste work.
type Maintainer struct {
	cat  lake.Catalog
	opts Options
	log  *slog.Logger
	// compacted: per append-only table, its data files after its last
	// compaction by this Maintainer (Check).
	mu        sync.Mutex
	compacted map[string]int
}

// New returns a Maintainer.
func New(cat lake.Catalog, opts Options, log *slog.Logger) *Maintainer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Maintainer{cat: cat, opts: opts.withDefaults(), log: log, compacted: map[string]int{}}
}

// Tables returns the identifiers of source's lake tables: for each source
// table (all, or those in only) its bronze then its silver table, then
// bronze's and silver's special tables (all only).
func (m *Maintainer) Tables(ctx context.Context, source string, only []change.TableID) ([][]string, error) {
	want := func(id []string) bool {
		return len(only) == 0 || slices.Contains(only, change.TableID{Schema: id[2], Name: id[3]})
	}
	var out [][]string
	for _, level := range []string{"bronze", "silver"} {
		ids, err := m.cat.TablesUnder(ctx, []string{level, source})
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			if want(id) {
				out = append(out, id)
			}
		}
	}
	if len(only) == 0 {
		for _, ns := range [][]string{bronze.SourceNamespace(source), {"silver", source}} {
			ids, err := m.cat.ListTables(ctx, ns)
			if errors.Is(err, lake.ErrNoSuchNamespace) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, ids...)
		}
	}
	return out, nil
}

// Run maintains every table of source (or those in only), one at a time,
// and returns each table's result; errors of single tables are joined, the
// other tables are maintained regardless.
func (m *Maintainer) Run(ctx context.Context, source string, only []change.TableID) ([]Result, error) {
	ids, err := m.Tables(ctx, source, only)
	if err != nil {
		return nil, fmt.Errorf("maintain: list the tables of source %s: %w", source, err)
	}
	var (
		out  []Result
		errs []error
	)
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		r, err := m.Table(ctx, source, id)
		out = append(out, r)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// Table maintains one table: compaction, then snapshot expiry, then
// orphan-file removal.
func (m *Maintainer) Table(ctx context.Context, source string, ident []string) (Result, error) {
	defer m.exclusive()()
	res := Result{Table: strings.Join(ident, ".")}
	t, err := m.cat.Open(ctx, ident)
	if err != nil {
		return res, fmt.Errorf("maintain %s: %w", res.Table, err)
	}
	tbl, ok := t.(lake.Maintained)
	if !ok {
		return res, fmt.Errorf("maintain %s: tables of type %T have no maintenance", res.Table, t)
	}
	if res.Before, err = tbl.Footprint(ctx); err != nil {
		return res, fmt.Errorf("maintain %s: %w", res.Table, err)
	}
	// A silver table still giving older rows the default of a column added
	// at the source is not compacted: a rewritten file would hold the
	// column as NULL, and the fill finds its rows by the files without it.
	if !m.opts.NoCompact && len(silver.FillPending(tbl)) == 0 {
		c, err := tbl.Compact(ctx, lake.CompactOptions{TargetFileSize: m.opts.TargetFileSize, DryRun: m.opts.DryRun})
		res.Compact = c
		switch {
		case errors.Is(err, lake.ErrCommitConflict):
			// A merge changed the table meanwhile: nothing applied, the
			// next run compacts.
			res.CompactError = err.Error()
			m.log.Info("compaction gave way to a concurrent commit; the next run retries", "table", res.Table, "error", err.Error())
		case err != nil:
			return res, fmt.Errorf("maintain %s: %w", res.Table, err)
		}
	}
	if !m.opts.NoExpire {
		keep, note, err := m.keepFrom(ctx, source, ident, tbl)
		if err != nil {
			return res, fmt.Errorf("maintain %s: %w", res.Table, err)
		}
		res.ExpireNote = note
		if keep != lake.NoSnapshot {
			res.KeptFrom = keep
		}
		if note == "" || keep != lake.NoSnapshot {
			e, err := tbl.ExpireSnapshots(ctx, lake.ExpireOptions{OlderThan: m.opts.OlderThan, RetainLast: m.opts.RetainLast,
				KeepFrom: keep, DryRun: m.opts.DryRun})
			switch {
			case errors.Is(err, lake.ErrCommitConflict):
				// Merges kept committing through every attempt: nothing
				// expired, the next run retries.
				res.ExpireNote = err.Error()
				m.log.Info("snapshot expiry gave way to concurrent commits; the next run retries", "table", res.Table, "error", err.Error())
			case err != nil:
				return res, fmt.Errorf("maintain %s: %w", res.Table, err)
			default:
				res.Expired = len(e.Expired)
			}
		}
	}
	if !m.opts.NoOrphans {
		o, err := tbl.RemoveOrphanFiles(ctx, m.opts.OrphanAge, m.opts.DryRun)
		if err != nil {
			return res, fmt.Errorf("maintain %s: %w", res.Table, err)
		}
		res.Orphans, res.OrphanBytes = len(o.Files), o.Bytes
	}
	if err := tbl.Refresh(ctx); err != nil {
		return res, fmt.Errorf("maintain %s: %w", res.Table, err)
	}
	if res.After, err = tbl.Footprint(ctx); err != nil {
		return res, fmt.Errorf("maintain %s: %w", res.Table, err)
	}
	m.mu.Lock()
	m.compacted[res.Table] = res.After.DataFiles
	m.mu.Unlock()
	if res.Compact.Snapshot != 0 || res.Expired > 0 || res.Orphans > 0 {
		m.log.Info("table maintained", "table", res.Table, "dry_run", m.opts.DryRun,
			"data_files", fmt.Sprintf("%d->%d", res.Before.DataFiles, res.After.DataFiles),
			"delete_files", fmt.Sprintf("%d->%d", res.Before.DeleteFiles, res.After.DeleteFiles),
			"snapshots", fmt.Sprintf("%d->%d", res.Before.Snapshots, res.After.Snapshots),
			"orphan_files", res.Orphans)
	}
	return res, nil
}

// keepFrom returns the oldest snapshot of a bronze table that silver may
// still read (lake.NoSnapshot: no limit). A non-empty note with
// lake.NoSnapshot means: expire nothing.
func (m *Maintainer) keepFrom(ctx context.Context, source string, ident []string, tbl lake.Table) (int64, string, error) {
	if m.opts.WithoutSilver || len(ident) != 4 || ident[0] != "bronze" || ident[1] != source {
		return lake.NoSnapshot, "", nil
	}
	schema, name := ident[2], ident[3]
	// A build reads bronze from its first snapshot.
	if _, err := m.cat.Open(ctx, []string{"silver", source, "_building", schema, name}); err == nil {
		return lake.NoSnapshot, "silver table is being built: bronze keeps every snapshot", nil
	} else if !errors.Is(err, lake.ErrNoSuchTable) && !errors.Is(err, lake.ErrNoSuchNamespace) {
		return 0, "", err
	}
	s, err := m.cat.Open(ctx, silver.Ident(source, schema, name))
	if errors.Is(err, lake.ErrNoSuchTable) || errors.Is(err, lake.ErrNoSuchNamespace) {
		return lake.NoSnapshot, "no silver table yet (its first build reads all of bronze): bronze keeps every snapshot", nil
	}
	if err != nil {
		return 0, "", err
	}
	raw := s.Summary()[silver.PropBronzeSnapshot]
	cur, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return lake.NoSnapshot, fmt.Sprintf("silver table has no readable cursor (%q): bronze keeps every snapshot", raw), nil
	}
	if _, err := tbl.Snapshot(cur); err != nil {
		return lake.NoSnapshot, fmt.Sprintf("silver's cursor %d is not in bronze's history: bronze keeps every snapshot", cur), nil
	}
	return cur, "", nil
}

// PropDue is the namespace property (of bronze.<source>) that says when
// source's next maintenance run is due, in Unix milliseconds: Loop records
// it when it starts without one and after every run, so that a process
// that restarts (a crash loop, a redeploy) keeps the schedule instead of
// starting a new period: a pipeline whose processes all live less than a
// period would otherwise never be maintained.
const PropDue = "tidemark.maintenance-due"

// Loop maintains every table of source every `every` (DefaultEvery if
// <= 0), until ctx is done. When it starts, it runs at once if the run
// PropDue records is due (else when it is due; a pipeline without one is
// due one period from now), or else compacts the append-only tables past
// their bound (Check); between runs, every DefaultCheckEvery (or `every`,
// if shorter), it checks again. It is the maintenance half of `tidemark
// run`: a failure is logged and retried at the next period, never stops
// the pipeline (maintenance is deferrable).
func (m *Maintainer) Loop(ctx context.Context, source string, every time.Duration) {
	if every <= 0 {
		every = DefaultEvery
	}
	timer := time.NewTimer(m.Start(ctx, source, every))
	defer timer.Stop()
	check := time.NewTicker(min(every, DefaultCheckEvery))
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-check.C:
			m.check(ctx, source)
			continue
		case <-timer.C:
		}
		m.run(ctx, source, every)
		timer.Reset(every)
	}
}

// Start is what Loop does when it starts: the run PropDue records for
// source, if it is due, or a Check. It returns how long until the next run
// is due.
func (m *Maintainer) Start(ctx context.Context, source string, every time.Duration) time.Duration {
	now := time.Now()
	due, ok := m.due(ctx, source)
	if !ok {
		due = now.Add(every)
		m.setDue(ctx, source, due)
	}
	if due.After(now) {
		m.check(ctx, source)
		return due.Sub(now)
	}
	m.log.Info("maintenance is due (by the schedule the last process recorded): running it now", "source", source,
		"due", due.UTC().Format(time.RFC3339))
	m.run(ctx, source, every)
	return every
}

// run runs maintenance once for Loop, and records when the next is due.
func (m *Maintainer) run(ctx context.Context, source string, every time.Duration) {
	_, err := m.Run(ctx, source, nil)
	if ctx.Err() != nil {
		return // cut short: still due
	}
	if err != nil {
		m.log.Warn("maintenance failed, retrying at the next run", "error", err.Error(), "retry_in", every.String())
	}
	m.setDue(ctx, source, time.Now().Add(every))
	if m.opts.OnRun != nil {
		m.opts.OnRun(err)
	}
}

// check runs Check for Loop.
func (m *Maintainer) check(ctx context.Context, source string) {
	if m.opts.NoCompact || m.opts.DryRun {
		return
	}
	if _, err := m.Check(ctx, source); err != nil && ctx.Err() == nil {
		m.log.Warn("maintenance check failed, retrying at the next check", "error", err.Error())
	}
}

// due reads PropDue of source; ok is false when there is none (or no
// bronze namespace yet, or it cannot be read: then Loop keeps its own time).
func (m *Maintainer) due(ctx context.Context, source string) (time.Time, bool) {
	props, err := m.cat.NamespaceProperties(ctx, []string{"bronze", source})
	if err != nil {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(props[PropDue], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// setDue records when source's next maintenance run is due. Without a
// bronze namespace yet (nothing captured) there is nothing to record.
func (m *Maintainer) setDue(ctx context.Context, source string, at time.Time) {
	if m.opts.DryRun {
		return
	}
	err := m.cat.SetNamespaceProperties(ctx, []string{"bronze", source}, map[string]string{PropDue: strconv.FormatInt(at.UnixMilli(), 10)})
	if err != nil && !errors.Is(err, lake.ErrNoSuchNamespace) && ctx.Err() == nil {
		m.log.Warn("could not record when maintenance is due next", "source", source, "error", err.Error())
	}
}

// Check compacts, of source's append-only tables (bronze, its checkpoint
// table, silver's dead letters), those with BronzeCompactFiles data files
// more than their last compaction left (by day partition: Compact rewrites
// each partition's small files), and returns what it compacted. Silver's
// keyed tables are left to the merger, which compacts them by their
// footprint between its merges (silver.CheckFootprint). Reads manifests
// only for the tables it leaves alone.
func (m *Maintainer) Check(ctx context.Context, source string) ([]Result, error) {
	ids, err := m.Tables(ctx, source, nil)
	if err != nil {
		return nil, fmt.Errorf("maintain: list the tables of source %s: %w", source, err)
	}
	var (
		out  []Result
		errs []error
	)
	dead := strings.Join(silver.DeadLetterIdent(source), ".")
	for _, id := range ids {
		name := strings.Join(id, ".")
		if id[0] != "bronze" && name != dead {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		r, did, err := m.checkTable(ctx, id)
		if err != nil {
			errs = append(errs, err)
		}
		if did {
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}

func (m *Maintainer) checkTable(ctx context.Context, ident []string) (Result, bool, error) {
	defer m.exclusive()()
	res := Result{Table: strings.Join(ident, ".")}
	t, err := m.cat.Open(ctx, ident)
	if err != nil {
		return res, false, fmt.Errorf("maintain %s: %w", res.Table, err)
	}
	tbl, ok := t.(lake.Maintained)
	if !ok {
		return res, false, nil
	}
	if res.Before, err = tbl.Footprint(ctx); err != nil {
		return res, false, fmt.Errorf("maintain %s: %w", res.Table, err)
	}
	m.mu.Lock()
	last := m.compacted[res.Table]
	m.mu.Unlock()
	if res.Before.DataFiles < last+BronzeCompactFiles {
		return res, false, nil
	}
	c, err := tbl.Compact(ctx, lake.CompactOptions{TargetFileSize: m.opts.TargetFileSize})
	res.Compact = c
	if errors.Is(err, lake.ErrCommitConflict) {
		res.CompactError = err.Error()
		return res, true, nil
	}
	if err != nil {
		return res, false, fmt.Errorf("maintain %s: %w", res.Table, err)
	}
	res.After = res.Before
	res.After.DataFiles += c.AddedDataFiles - c.RemovedDataFiles
	res.After.DeleteFiles -= c.RemovedDeleteFiles
	m.mu.Lock()
	m.compacted[res.Table] = res.After.DataFiles
	m.mu.Unlock()
	m.log.Info("table compacted by its file count", "table", res.Table,
		"data_files", fmt.Sprintf("%d->%d", res.Before.DataFiles, res.After.DataFiles), "partitions", c.Partitions)
	return res, true, nil
}
