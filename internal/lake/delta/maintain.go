package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"

	"github.com/tidemark/tidemark/internal/lake"
)

// Maintenance of a Delta table (lake.Maintained): OPTIMIZE (Compact), log
// cleanup and VACUUM (ExpireSnapshots), orphan files (RemoveOrphanFiles).

var _ lake.Maintained = (*lakeTable)(nil)

// defaultTargetFileSize is the size compaction aims for when not told.
const defaultTargetFileSize = 128 << 20

// Footprint measures the cached snapshot: its active files, the rows their
// deletion vectors delete, and the commits in the log (Snapshots).
func (l *lakeTable) Footprint(ctx context.Context) (lake.Footprint, error) {
	var fp lake.Footprint
	_, files := l.t.snapshot()
	for i := range files {
		fp.DataFiles++
		fp.DataBytes += files[i].Size
		if n, ok := numRecords(&files[i]); ok {
			fp.Records += n
		}
		if dv, err := parseDV(files[i].DeletionVector); err == nil && dv != nil {
			fp.DeleteFiles++ // a deletion vector, inline in the log
			fp.DeletedRecords += dv.Cardinality
		}
	}
	lst, err := listLog(l.t.dir)
	if err != nil {
		return fp, l.wrap(err)
	}
	fp.Snapshots = len(lst.commits)
	return fp, nil
}

// Compact rewrites (OPTIMIZE) the live rows of the files below 3/4 of the
// target size and of the files with deleted rows, by partition, into files
// of about the target size, in one commit whose removes and adds have
// dataChange = false (change data feed readers skip it) and whose
// userMetadata is the head snapshot's (the cursor stays). A winner that
// removed or deleted rows of one of the files fails it with
// ErrCommitConflict; other winners (appends) are committed on top of.
func (l *lakeTable) Compact(ctx context.Context, opts lake.CompactOptions) (lake.CompactResult, error) {
	res, err := l.t.compact(ctx, opts, func(read int64) map[string]string {
		s, ok, err := l.headAt(read)
		if err != nil || !ok {
			return nil
		}
		return s.Props
	})
	return res, l.wrap(err)
}

func (t *Table) compact(ctx context.Context, opts lake.CompactOptions, props func(read int64) map[string]string) (lake.CompactResult, error) {
	var res lake.CompactResult
	target := opts.TargetFileSize
	if target <= 0 {
		target = defaultTargetFileSize
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := checkWritable(t.st.protocol, t.st.meta); err != nil {
		return res, err
	}
	// Candidates by partition value.
	groups := map[string][]*Add{}
	var order []string
	for _, k := range t.st.order {
		f := t.st.files[k]
		dv, _ := parseDV(f.DeletionVector)
		if f.Size >= target*3/4 && dv == nil {
			continue
		}
		pk := ""
		for _, v := range f.PartitionValues {
			if v != nil {
				pk = *v
			}
		}
		if _, ok := groups[pk]; !ok {
			order = append(order, pk)
		}
		groups[pk] = append(groups[pk], f)
	}
	var picked []*Add
	for _, pk := range order {
		g := groups[pk]
		if len(g) < 2 {
			if dv, _ := parseDV(g[0].DeletionVector); dv == nil {
				continue // one small file alone: nothing to gain
			}
		}
		res.Partitions++
		picked = append(picked, g...)
	}
	for _, f := range picked {
		res.RemovedDataFiles++
		res.BytesBefore += f.Size
		if dv, _ := parseDV(f.DeletionVector); dv != nil {
			res.RemovedDeleteFiles++
		}
	}
	if len(picked) == 0 || opts.DryRun {
		return res, nil
	}
	// Read the live rows, writing a file each time about target bytes of
	// rows are held (a Parquet file is smaller than its rows in memory:
	// files come out at or below the target).
	var adds []written
	drop := func() {
		for _, a := range adds {
			if p, err := t.filePath(a.add.Path); err == nil {
				os.Remove(p)
			}
		}
	}
	var held []arrow.RecordBatch
	var heldBytes int64
	flush := func() error {
		defer func() {
			for _, r := range held {
				r.Release()
			}
			held, heldBytes = nil, 0
		}()
		if len(held) == 0 {
			return nil
		}
		w, err := t.writeData(ctx, held)
		if err != nil {
			return err
		}
		adds = append(adds, w...)
		return nil
	}
	for _, f := range picked {
		err := t.readFile(ctx, *f, t.schema, func(rec arrow.RecordBatch, _ lake.Positions) error {
			rec.Retain()
			held = append(held, rec)
			heldBytes += lake.RecordBytes(rec)
			if heldBytes >= target {
				return flush()
			}
			return nil
		})
		if err != nil {
			for _, r := range held {
				r.Release()
			}
			drop()
			return res, err
		}
	}
	if err := flush(); err != nil {
		drop()
		return res, err
	}
	now := nowMs()
	for i := range adds {
		adds[i].add.DataChange = false
		res.BytesAfter += adds[i].add.Size
	}
	res.AddedDataFiles = len(adds)
	paths := map[string]bool{}
	for _, f := range picked {
		paths[f.Path] = true
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			drop()
			return res, err
		}
		v := t.st.version + 1
		ci := map[string]any{
			"timestamp":           now,
			"operation":           "OPTIMIZE",
			"operationParameters": map[string]any{"targetSize": fmt.Sprint(target)},
			"readVersion":         v - 1,
			"isBlindAppend":       false,
			"operationMetrics": map[string]any{
				"numRemovedFiles": fmt.Sprint(len(picked)),
				"numAddedFiles":   fmt.Sprint(len(adds)),
				"numRemovedBytes": fmt.Sprint(res.BytesBefore),
				"numAddedBytes":   fmt.Sprint(res.BytesAfter),
			},
			"engineInfo": engineInfo,
			"txnId":      uuid.NewString(),
		}
		if p := props(v - 1); len(p) > 0 {
			ci["userMetadata"] = mustJSON(p)
		}
		acts := []action{{CommitInfo: ci}}
		for _, f := range picked {
			size := f.Size
			acts = append(acts, action{Remove: &Remove{
				Path: f.Path, DeletionTimestamp: &now, DataChange: false, ExtendedFileMetadata: true,
				PartitionValues: f.PartitionValues, Size: &size, DeletionVector: f.DeletionVector,
			}})
		}
		for _, a := range adds {
			acts = append(acts, action{Add: a.add})
		}
		data, err := encodeCommit(acts)
		if err != nil {
			drop()
			return res, err
		}
		err = putIfAbsent(t.dir, v, data)
		var unsynced *unsyncedError
		if err == nil || errors.As(err, &unsynced) {
			t.st.apply(v, acts)
			res.Snapshot = v
			if err != nil {
				return res, err
			}
			return res, t.maybeCheckpoint(v)
		}
		if !errors.Is(err, errVersionTaken) || attempt == maxCommitAttempts {
			drop()
			if errors.Is(err, errVersionTaken) {
				err = fmt.Errorf("version %d taken after %d attempts: %w", v, attempt, ErrCommitConflict)
			}
			return res, err
		}
		// The winners: one that removed (or deleted rows of) a file being
		// rewritten conflicts; a metaData change does too (the schema).
		for w := v; ; w++ {
			wacts, err := readCommit(t.dir, w)
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if err != nil {
				drop()
				return res, err
			}
			for _, a := range wacts {
				if (a.Remove != nil && paths[a.Remove.Path]) || a.MetaData != nil || a.Protocol != nil {
					drop()
					if st, err := loadState(ctx, t.dir); err == nil {
						_ = t.setState(st)
					}
					return res, fmt.Errorf("commit %d changed the table or a file being compacted: %w", w, ErrCommitConflict)
				}
			}
			t.st.apply(w, wacts)
		}
	}
}

// ExpireSnapshots cleans the log up and vacuums: with a checkpoint of the
// version k before the oldest snapshot kept (written if missing), the
// commits up to k and older checkpoints are deleted, with the data files
// their commits removed that no version after k uses, and their change
// data files. Kept are the RetainLast newest
// snapshots, those younger than OlderThan and those from KeepFrom on;
// versions after k stay readable (time travel, History, ScanAppended).
func (l *lakeTable) ExpireSnapshots(ctx context.Context, opts lake.ExpireOptions) (lake.ExpireResult, error) {
	var res lake.ExpireResult
	if err := l.t.Refresh(ctx); err != nil {
		return res, l.wrap(err)
	}
	lst, err := listLog(l.t.dir)
	if err != nil {
		return res, l.wrap(err)
	}
	var snaps []int64 // snapshot versions in the log, oldest first
	for _, v := range lst.commits {
		k, err := l.kind(v)
		if err != nil {
			return res, l.wrap(err)
		}
		if k.snap {
			snaps = append(snaps, v)
		}
	}
	if len(snaps) == 0 {
		return res, nil
	}
	keep := snaps[len(snaps)-1] // the oldest snapshot kept
	retain := max(opts.RetainLast, 1)
	if len(snaps) >= retain {
		keep = min(keep, snaps[len(snaps)-retain])
	} else {
		keep = snaps[0]
	}
	cutoff := time.Now().Add(-opts.OlderThan).UnixMilli()
	for _, v := range snaps {
		if k, _ := l.kind(v); k.s.TimestampMs >= cutoff {
			keep = min(keep, v)
			break
		}
	}
	if opts.KeepFrom != lake.NoSnapshot {
		if !slices.Contains(snaps, opts.KeepFrom) {
			return res, fmt.Errorf("table %s: keep from snapshot %d: %w", l.name(), opts.KeepFrom, lake.ErrSnapshotNotFound)
		}
		keep = min(keep, opts.KeepFrom)
	}
	// The commits before keep go, once a checkpoint of keep-1 holds the
	// table's state there.
	k := keep - 1
	for _, v := range snaps {
		if v <= k {
			res.Expired = append(res.Expired, v)
		} else {
			res.Remaining++
		}
	}
	if k < 0 || len(res.Expired) == 0 || opts.DryRun {
		return res, nil
	}
	if !slices.Contains(lst.checkpoints, k) {
		st, err := loadStateAt(ctx, l.t.dir, k)
		if err != nil {
			return res, l.wrap(fmt.Errorf("the state at version %d, for its checkpoint: %w", k, err))
		}
		newest := len(lst.checkpoints) == 0 || lst.checkpoints[len(lst.checkpoints)-1] < k
		if err := writeCheckpointFile(l.t.dir, st, l.t.mem, newest); err != nil {
			return res, l.wrap(err)
		}
	}
	if err := l.t.cleanLog(ctx, k, lst); err != nil {
		return res, l.wrap(err)
	}
	l.mu.Lock()
	for v := range l.kinds {
		if v <= k {
			delete(l.kinds, v)
		}
	}
	l.mu.Unlock()
	return res, nil
}

// cleanLog deletes the data files the commits up to k removed that the
// table no longer uses, then the checkpoints before k and the commits up
// to k (a checkpoint of k exists).
func (t *Table) cleanLog(ctx context.Context, k int64, lst listing) error {
	active := map[string]bool{}
	_, files := t.snapshot()
	for _, f := range files {
		active[decodedPath(f.Path)] = true
	}
	// A file removed at version k+1 (the oldest kept) or before is used by
	// no version kept (version k stays only as the checkpoint the later
	// ones are read from).
	gone := map[string]bool{}
	for _, v := range lst.commits {
		if v > k+1 {
			break
		}
		acts, err := readCommit(t.dir, v)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, a := range acts {
			if a.Remove != nil && !active[decodedPath(a.Remove.Path)] {
				gone[a.Remove.Path] = true
			}
			if len(a.CDC) > 0 && v <= k {
				// Change data of an expired version.
				var c CDCFile
				if json.Unmarshal(a.CDC, &c) == nil && c.Path != "" {
					gone[c.Path] = true
				}
			}
		}
	}
	// Files removed later are still used by the versions kept.
	for _, v := range lst.commits {
		if v <= k+1 {
			continue
		}
		acts, err := readCommit(t.dir, v)
		if err != nil {
			return err
		}
		for _, a := range acts {
			if a.Remove != nil {
				delete(gone, a.Remove.Path)
			}
		}
	}
	for p := range gone {
		if err := ctx.Err(); err != nil {
			return err
		}
		fp, err := t.filePath(p)
		if err != nil {
			continue
		}
		if err := os.Remove(fp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	// Later checkpoints need not list the files vacuumed.
	t.mu.Lock()
	for key, r := range t.st.tombstones {
		if gone[r.Path] {
			delete(t.st.tombstones, key)
		}
	}
	t.mu.Unlock()
	for _, c := range lst.checkpoints {
		if c < k {
			if err := os.Remove(t.logPath(checkpointName(c))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	for _, v := range lst.commits {
		if v > k {
			break
		}
		if err := os.Remove(t.logPath(commitName(v))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// RemoveOrphanFiles deletes the files nothing of the table references
// (RemoveOrphans), or lists them in a dry run.
func (l *lakeTable) RemoveOrphanFiles(ctx context.Context, olderThan time.Duration, dryRun bool) (lake.OrphanResult, error) {
	var res lake.OrphanResult
	files, bytes, err := l.t.removeOrphans(ctx, olderThan, dryRun)
	res.Files, res.Bytes = files, bytes
	return res, l.wrap(err)
}

func (t *Table) logPath(name string) string { return filepath.Join(t.dir, logDir, name) }
