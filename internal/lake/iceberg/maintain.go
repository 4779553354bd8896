package iceberg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	iceberggo "github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/tidemark/tidemark/internal/lake"
)

// This file holds table maintenance: compaction of small data files and
// of position deletes, snapshot expiry and orphan-file removal. Every
// maintenance commit is a compare-and-swap on the table's head (never
// replayed by iceberg-go onto a newer head), and a compaction snapshot
// carries the tidemark.* summary keys of the snapshot it replaces: bronze
// and silver read their cursors from the current snapshot's summary, so a
// maintenance commit must leave them exactly as they were.

// StatePrefix starts the summary keys that hold tidemark's state (cursor,
// position, snapshot progress, silver's bronze cursor).
const StatePrefix = "tidemark."

// Footprint is what a table's current state costs (lake.Footprint).
type Footprint = lake.Footprint

// Footprint measures the table as last loaded (Refresh first for the
// catalog's latest). It reads manifests, no data file.
func (t *Table) Footprint(ctx context.Context) (Footprint, error) {
	tbl := t.current()
	fp := Footprint{Snapshots: len(tbl.Metadata().Snapshots())}
	if tbl.CurrentSnapshot() == nil {
		return fp, nil
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		return fp, fmt.Errorf("iceberg: table %s: plan files: %w", t.name, err)
	}
	seen := map[string]bool{}
	for _, task := range tasks {
		fp.DataFiles++
		fp.DataBytes += task.File.FileSizeBytes()
		fp.Records += task.File.Count()
		for _, group := range [][]iceberggo.DataFile{task.DeleteFiles, task.EqualityDeleteFiles, task.DeletionVectorFiles} {
			for _, d := range group {
				if !seen[d.FilePath()] {
					seen[d.FilePath()] = true
					fp.DeleteFiles++
					fp.DeleteBytes += d.FileSizeBytes()
					fp.DeletedRecords += d.Count()
				}
			}
		}
	}
	return fp, nil
}

// CompactOptions tune Compact (lake.CompactOptions). TargetFileSize 0 is
// the table's write.target-file-size-bytes (512 MiB by default).
type CompactOptions = lake.CompactOptions

// CompactResult says what Compact did (lake.CompactResult).
type CompactResult = lake.CompactResult

// Compact rewrites, per partition, the small data files and every data
// file that position or equality deletes apply to into fewer files with
// the deletes applied, and drops the delete files that no longer apply to
// any live data file, in one snapshot (operation "replace"). Rows read the
// same before and after. A partition is rewritten when it has two small
// files or more, or any file with deletes.
//
// The snapshot's summary carries the tidemark.* keys of the snapshot it
// replaces. Writers keep committing meanwhile: when another writer commits
// first, Compact re-applies its rewrite to the new head (with the new
// head's tidemark.* keys), unless that writer added deletes to a file being
// rewritten (a silver merge): then the error wraps ErrCommitConflict, the
// files it wrote are removed and nothing is applied. Safe to run while
// bronze appends and silver merges.
func (t *Table) Compact(ctx context.Context, opts CompactOptions) (CompactResult, error) {
	var res CompactResult
	base := t.current()
	snap := base.CurrentSnapshot()
	if snap == nil {
		return res, nil
	}
	target := opts.TargetFileSize
	if target <= 0 {
		target = int64(base.Properties().GetInt(table.WriteTargetFileSizeBytesKey, table.WriteTargetFileSizeBytesDefault))
	}
	tasks, err := base.Scan().PlanFiles(ctx)
	if err != nil {
		return res, fmt.Errorf("iceberg: compact table %s: plan files: %w", t.name, err)
	}
	sc, err := table.SchemaToArrowSchema(base.Schema(), nil, true, false) // base's, as set makes it
	if err != nil {
		return res, fmt.Errorf("iceberg: compact table %s: %w", t.name, err)
	}
	tasks, big, err := ownCompactable(ctx, base, sc, tasks)
	if err != nil {
		return res, fmt.Errorf("iceberg: compact table %s: %w", t.name, err)
	}
	groups := planCompaction(tasks, target)
	if len(groups) == 0 {
		return res, nil
	}
	rewritten := map[string]struct{}{}
	for _, g := range groups {
		res.Partitions++
		res.BytesBefore += g.TotalSizeBytes
		for _, task := range g.Tasks {
			rewritten[task.File.FilePath()] = struct{}{}
		}
	}
	res.RemovedDataFiles = len(rewritten)
	fs, err := base.FS(ctx)
	if err != nil {
		return res, fmt.Errorf("iceberg: compact table %s: %w", t.name, err)
	}
	// A delete file may also apply to data files left alone (large ones):
	// only those that apply to rewritten files alone may go.
	dead, err := table.CollectDeadPositionDeletes(ctx, fs, snap, rewritten)
	if err != nil {
		return res, fmt.Errorf("iceberg: compact table %s: find the delete files compaction folds in: %w", t.name, err)
	}
	deadSet := map[string]bool{}
	for _, d := range dead {
		deadSet[d.FilePath()] = true
	}
	if opts.DryRun {
		res.RemovedDeleteFiles = len(deadSet)
		return res, nil
	}

	var results []table.CompactionGroupResult
	cleanup := func() {
		for _, gr := range results {
			for _, df := range gr.NewDataFiles {
				_ = fs.Remove(df.FilePath())
			}
		}
	}
	for _, g := range groups {
		var gr table.CompactionGroupResult
		if slices.ContainsFunc(g.Tasks, func(task table.FileScanTask) bool { return big[task.File.FilePath()] }) {
			gr, err = compactOwn(ctx, base, sc, g, target)
		} else {
			var decoded int64
			if decoded, err = decodedBytes(fs, g); err == nil {
				gr, err = table.ExecuteCompactionGroup(ctx, base, g, compactionBounds(g, target, decoded)...)
			}
		}
		results = append(results, gr)
		if err != nil {
			cleanup()
			return res, fmt.Errorf("iceberg: compact table %s: %w", t.name, err)
		}
		// Keep only the position deletes that apply to rewritten files alone.
		gr.SafePosDeletes = slices.DeleteFunc(gr.SafePosDeletes, func(d iceberggo.DataFile) bool { return !deadSet[d.FilePath()] })
		results[len(results)-1] = gr
		res.AddedDataFiles += len(gr.NewDataFiles)
		res.BytesAfter += gr.BytesAfter
		res.RemovedDeleteFiles += len(gr.SafePosDeletes) + len(gr.SafeDeletionVectors)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	for attempt := 1; ; attempt++ {
		err := t.refreshLocked(ctx)
		if err != nil {
			cleanup() // nothing was committed yet
			return res, fmt.Errorf("iceberg: compact table %s: %w", t.name, err)
		}
		if err = t.onlyAppendsSince(snap.SnapshotID); err != nil {
			cleanup()
			return res, fmt.Errorf("iceberg: compact table %s: %w", t.name, err)
		}
		base := t.tbl.MetadataLocation()
		id, err := t.commitRewrite(ctx, results)
		if err == nil {
			res.Snapshot = id
			return res, nil
		}
		if errors.Is(err, ErrCommitConflict) || id == 0 {
			cleanup() // refused before any commit
			return res, fmt.Errorf("iceberg: compact table %s: %w", t.name, err)
		}
		// A lost race shows as ErrCommitFailed or as a plain "requirement
		// failed"; any other error may hide a commit that landed. Reload
		// and look.
		if rerr := t.refreshLocked(ctx); rerr != nil {
			// Outcome unknown: the files stay (orphan removal takes them
			// if the commit did not land).
			return res, fmt.Errorf("iceberg: compact table %s: %w", t.name,
				errors.Join(err, fmt.Errorf("reload after failed commit (outcome unknown): %w", rerr)))
		}
		if t.tbl.Metadata().SnapshotByID(id) != nil {
			res.Snapshot = id
			return res, nil
		}
		if t.tbl.MetadataLocation() == base {
			cleanup()
			return res, fmt.Errorf("iceberg: compact table %s: %w", t.name, err)
		}
		if attempt == commitAttempts {
			// Writers committed before each attempt (bronze appending
			// every few hundred ms): a lost race, nothing applied.
			cleanup()
			return res, fmt.Errorf("iceberg: compact table %s: %w: lost %d races to other writers: %w", t.name, ErrCommitConflict, attempt, err)
		}
		if berr := backoff(ctx, attempt); berr != nil {
			cleanup()
			return res, fmt.Errorf("iceberg: compact table %s: %w", t.name, errors.Join(err, berr))
		}
	}
}

// onlyAppendsSince checks that every snapshot committed after planned (an
// ancestor of the current one) only appended: a rewrite planned on planned
// then still reads the same rows. A delete or another rewrite meanwhile
// (a silver merge, another maintenance run) wraps ErrCommitConflict; t.mu
// is held.
func (t *Table) onlyAppendsSince(planned int64) error {
	meta := t.tbl.Metadata()
	cur := meta.CurrentSnapshot()
	if cur == nil {
		return fmt.Errorf("%w: the table has no snapshot any more", ErrCommitConflict)
	}
	chain, ok := table.AncestorsBetween(cur.SnapshotID, planned, meta.SnapshotByID)
	if !ok && cur.SnapshotID != planned {
		return fmt.Errorf("%w: snapshot %d, which compaction read, is no longer in the history", ErrCommitConflict, planned)
	}
	for _, s := range chain {
		if s.SnapshotID == planned {
			continue
		}
		if s.Summary == nil || s.Summary.Operation != table.OpAppend {
			return fmt.Errorf("%w: snapshot %d (%s) changed the table while it was compacted",
				ErrCommitConflict, s.SnapshotID, s.Summary.Operation)
		}
	}
	return nil
}

// commitRewrite stages the rewrite on t's current head, pinned to it (no
// replay onto a newer head: its tidemark.* keys would be stale), with the
// head's tidemark.* keys, and commits; t.mu is held. id is the staged
// snapshot's id (0 if none was staged).
func (t *Table) commitRewrite(ctx context.Context, results []table.CompactionGroupResult) (id int64, err error) {
	head := t.tbl.CurrentSnapshot()
	tx := t.tbl.NewTransaction()
	if err := tx.AssertRefSnapshotID(table.MainBranch); err != nil {
		return 0, err
	}
	rw := tx.NewRewrite(stateProps(head))
	for _, gr := range results {
		rw.ApplyResult(gr)
	}
	if err := rw.Commit(ctx); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrCommitConflict, err)
	}
	staged, err := tx.StagedTable()
	if err != nil {
		return 0, err
	}
	if s := staged.CurrentSnapshot(); s != nil {
		id = s.SnapshotID
	}
	committed, err := tx.Commit(ctx)
	if err != nil {
		return id, err
	}
	if err := t.setCommitted(committed); err != nil {
		return id, fmt.Errorf("committed snapshot %d, but %w", id, err)
	}
	return id, nil
}

// stateProps returns the tidemark.* keys of a snapshot's summary.
func stateProps(s *table.Snapshot) iceberggo.Properties {
	out := iceberggo.Properties{}
	if s == nil || s.Summary == nil {
		return out
	}
	for k, v := range s.Summary.Properties {
		if strings.HasPrefix(k, StatePrefix) {
			out[k] = v
		}
	}
	return out
}

// planCompaction groups, per partition, the data files worth rewriting.
func planCompaction(tasks []table.FileScanTask, target int64) []table.CompactionTaskGroup {
	small := target * 3 / 4
	type part struct {
		tasks       []table.FileScanTask
		smallFiles  int
		withDeletes bool
	}
	parts := map[string]*part{}
	var order []string
	for _, task := range tasks {
		key := partitionKey(task.File)
		p, ok := parts[key]
		if !ok {
			p = &part{}
			parts[key] = p
			order = append(order, key)
		}
		deletes := len(task.DeleteFiles) + len(task.EqualityDeleteFiles) + len(task.DeletionVectorFiles)
		switch {
		case deletes > 0:
			p.withDeletes = true
		case task.File.FileSizeBytes() < small:
			p.smallFiles++
		default:
			continue // right-sized and clean
		}
		p.tasks = append(p.tasks, task)
	}
	var out []table.CompactionTaskGroup
	for _, key := range order {
		p := parts[key]
		if !p.withDeletes && p.smallFiles < 2 {
			continue
		}
		g := table.CompactionTaskGroup{PartitionKey: key, Tasks: p.tasks}
		for _, task := range p.tasks {
			g.TotalSizeBytes += task.File.FileSizeBytes()
		}
		out = append(out, g)
	}
	return out
}

func partitionKey(df iceberggo.DataFile) string {
	part := df.Partition()
	ids := slices.Sorted(maps.Keys(part))
	var b strings.Builder
	fmt.Fprintf(&b, "spec=%d", df.SpecID())
	for _, id := range ids {
		fmt.Fprintf(&b, "/%d=%v", id, part[id])
	}
	return b.String()
}

// ExpireOptions say which snapshots ExpireSnapshots keeps (lake.ExpireOptions).
type ExpireOptions = lake.ExpireOptions

// ExpireResult says which snapshots ExpireSnapshots removed (lake.ExpireResult).
type ExpireResult = lake.ExpireResult

// ExpireSnapshots removes old snapshots from the table's metadata, and
// the manifests and data files only they referenced. The current
// snapshot, the newest RetainLast, those younger than OlderThan and every
// snapshot from KeepFrom on are kept. It commits metadata only. A writer
// that commits between the plan and the commit (a silver merge) makes the
// catalog refuse it ("branch main has changed"): the expiry is planned
// again on the new head, whose new snapshots are newer and so kept, up to
// commitAttempts times; then the error wraps ErrCommitConflict.
func (t *Table) ExpireSnapshots(ctx context.Context, opts ExpireOptions) (ExpireResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for attempt := 1; ; attempt++ {
		res, retry, err := t.expireOnce(ctx, opts)
		if err == nil || !retry {
			return res, err
		}
		if attempt == commitAttempts {
			return res, fmt.Errorf("%w (another writer won %d attempts in a row): %w", ErrCommitConflict, commitAttempts, err)
		}
		lake.CountRetry(lake.RetryCommitConflict)
	}
}

// expireOnce plans and commits one expiry on the table as loaded; retry
// reports a commit refused because the table moved on (reloaded since).
func (t *Table) expireOnce(ctx context.Context, opts ExpireOptions) (res ExpireResult, retry bool, err error) {
	retain := max(opts.RetainLast, 1)
	meta := t.tbl.Metadata()
	cur := t.tbl.CurrentSnapshot()
	if cur == nil {
		return res, false, nil
	}
	if opts.KeepFrom != NoSnapshot {
		n := 0
		found := false
		for _, s := range table.AncestorsOf(cur.SnapshotID, meta.SnapshotByID) {
			n++
			if s.SnapshotID == opts.KeepFrom {
				found = true
				break
			}
		}
		if !found {
			return res, false, fmt.Errorf("iceberg: expire snapshots of table %s: snapshot %d to keep is not in its current history: %w",
				t.name, opts.KeepFrom, ErrSnapshotNotFound)
		}
		retain = max(retain, n)
	}
	before := map[int64]bool{}
	for _, s := range meta.Snapshots() {
		before[s.SnapshotID] = true
	}
	tx := t.tbl.NewTransaction()
	if err := tx.ExpireSnapshots(table.WithOlderThan(opts.OlderThan), table.WithRetainLast(retain)); err != nil {
		return res, false, fmt.Errorf("iceberg: expire snapshots of table %s: %w", t.name, err)
	}
	staged, err := tx.StagedTable()
	if err != nil {
		return res, false, fmt.Errorf("iceberg: expire snapshots of table %s: %w", t.name, err)
	}
	for _, s := range staged.Metadata().Snapshots() {
		delete(before, s.SnapshotID)
	}
	for id := range before {
		res.Expired = append(res.Expired, id)
	}
	slices.Sort(res.Expired)
	res.Remaining = len(meta.Snapshots()) - len(res.Expired)
	if opts.DryRun || len(res.Expired) == 0 {
		return res, false, nil
	}
	committed, err := tx.Commit(ctx)
	if err != nil {
		retry, rerr := t.afterFailedCommit(ctx, err, func(m table.Metadata) bool { return m.SnapshotByID(res.Expired[0]) == nil })
		if rerr != nil {
			return res, retry, fmt.Errorf("iceberg: expire snapshots of table %s: %w", t.name, rerr)
		}
		return res, false, nil
	}
	if err := t.setCommitted(committed); err != nil {
		return res, false, fmt.Errorf("iceberg: expire snapshots of table %s: committed, but %w", t.name, err)
	}
	return res, false, nil
}

// OrphanResult says which files RemoveOrphanFiles removed (lake.OrphanResult).
type OrphanResult = lake.OrphanResult

// RemoveOrphanFiles deletes the files under the table's location that no
// metadata of the table references (no snapshot, manifest, metadata file
// of its log) and that were last modified more than olderThan ago. A
// write in progress (data files written, commit not yet made) has files
// younger than that, so olderThan must exceed the longest write: a day is
// safe. The table is reloaded first, so files committed since it was
// loaded are seen as referenced.
func (t *Table) RemoveOrphanFiles(ctx context.Context, olderThan time.Duration, dryRun bool) (OrphanResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var res OrphanResult
	if olderThan <= 0 {
		return res, fmt.Errorf("iceberg: remove orphan files of table %s: the safety age must be positive", t.name)
	}
	var out table.OrphanCleanupResult
	for attempt := 1; ; attempt++ {
		if err := t.refreshLocked(ctx); err != nil {
			return res, fmt.Errorf("iceberg: remove orphan files of table %s: %w", t.name, err)
		}
		var err error
		out, err = t.tbl.DeleteOrphanFiles(ctx, table.WithFilesOlderThan(olderThan), table.WithDryRun(dryRun))
		if err == nil {
			break
		}
		// A file that vanished between listing a directory and reading
		// its entry (a writer's failed commit cleaning up its manifest
		// list, while the pipeline runs) fails iceberg-go's walk: list
		// again.
		if !errors.Is(err, fs.ErrNotExist) || attempt == 5 {
			return res, fmt.Errorf("iceberg: remove orphan files of table %s: %w", t.name, err)
		}
		lake.CountRetry(lake.RetryFileVanished)
		if err := pause(ctx, attempt); err != nil {
			return res, err
		}
	}
	for _, f := range out.OrphanFiles {
		res.Files = append(res.Files, f.Path)
		res.Bytes += f.SizeBytes
	}
	return res, nil
}

// Compaction's memory: iceberg-go's defaults decode a whole data file per
// scan worker (GOMAXPROCS of them), queue 64 batches of up to 131,072 rows
// for the writer and buffer a row group of up to 128 MiB of encoded pages
// before writing it. Measured on the crash storm's silver table (34 MB of
// files, 3 KB rows): 148 MiB of heap in one compaction, 58 MiB of it
// decoded batches and 45 MiB the buffered row group, which took a
// 256 MiB memory_budget session to 263 MiB resident. So a compaction reads
// with one worker, in batches of about compactBatchBytes of decoded rows,
// two of them queued, and writes row groups of about compactRowGroupBytes
// of file bytes (the writer holds encoded, compressed pages).
//
// A read batch is sized by what its rows take decoded (the files' footers
// state it), not by file bytes: text that compresses well (the storm of
// issue 22 wrote a bronze file of 120,000 rows, mostly 3 KB values, in
// 4 MB) made a batch of "1 MiB of file bytes" ~30,000 rows and ~50 MiB,
// built by doubling buffers and two of them queued: 210 MiB of heap
// compacting 1 MiB of files (TestCompactHeapIsBoundedCompressible), and
// sessions of 300-800 MiB resident under a 256 MiB budget.
const (
	compactBatchBytes    = 2 << 20
	compactRowGroupBytes = 16 << 20
)

// compactionBounds are the options of g's rewrite: target file size and
// the memory bounds above, in rows: read batches from g's files' decoded
// bytes per row (decoded: their sum, 0 if unknown: file bytes then),
// row groups from their file bytes per row.
func compactionBounds(g table.CompactionTaskGroup, target, decoded int64) []table.CompactionGroupOption {
	var rows, bytes int64
	for _, task := range g.Tasks {
		rows += task.File.Count()
		bytes += task.File.FileSizeBytes()
	}
	if decoded <= 0 {
		decoded = bytes
	}
	rowsIn := func(b, of int64) int {
		if of <= 0 || rows <= 0 {
			return 0 // the table's defaults
		}
		return int(min(max(b*rows/of, 64), 1<<17))
	}
	return []table.CompactionGroupOption{
		table.WithCompactionTargetFileSize(target),
		table.WithCompactionScanConcurrency(1),
		table.WithCompactionArrowBatchSize(rowsIn(compactBatchBytes, decoded)),
		table.WithCompactionRecordBatchBufferSize(2),
		table.WithCompactionParquetRowGroupLimit(rowsIn(compactRowGroupBytes, bytes)),
	}
}

// decodedBytes is what the rows of g's files take decoded, as their
// footers state (read once per process: footers): the column chunks'
// uncompressed bytes and an offset per value, as batchRows counts them.
// Dictionary-encoded columns count their encoded size, which is less.
func decodedBytes(fs icebergio.IO, g table.CompactionTaskGroup) (int64, error) {
	var n int64
	seen := map[string]bool{}
	for _, task := range g.Tasks {
		df := task.File
		if seen[df.FilePath()] {
			continue
		}
		seen[df.FilePath()] = true
		md := footers.get(df.FilePath(), df.FileSizeBytes())
		if md == nil {
			pf, err := openParquet(fs, memory.DefaultAllocator, df.FilePath())
			if err != nil {
				return 0, fmt.Errorf("data file %s: %w", df.FilePath(), err)
			}
			md = pf.MetaData()
			pf.Close()
		}
		for i := 0; i < md.NumRowGroups(); i++ {
			rg := md.RowGroup(i)
			for j := 0; j < rg.NumColumns(); j++ {
				if cc, err := rg.ColumnChunk(j); err == nil {
					n += cc.TotalUncompressedSize() + 4*cc.NumValues()
				}
			}
		}
	}
	return n, nil
}
