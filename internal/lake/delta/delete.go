package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"
)

// Delete marks rows of active files deleted with deletion vectors (rows:
// a file's add path -> positions in the file) and appends recs, in one
// commit with the txn of c (a replay is a no-op, as for Append). Each file
// is removed and re-added with the union of its old and new deleted rows.
// The table must have been created with DeletionVectors, without change
// data feed (its change data files are not written yet).
//
// After a lost race the winners are checked: a metaData or protocol
// change, or a winner that removed one of the files (a concurrent delete
// or rewrite), fails with ErrCommitConflict and nothing is written; other
// appends do not conflict.
func (t *Table) Delete(ctx context.Context, rows map[string][]int64, recs []arrow.RecordBatch, c Commit) (Result, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fail := func(err error) (Result, error) {
		return Result{}, fmt.Errorf("delete from Delta table %s: %w", t.dir, err)
	}
	if err := checkWritable(t.st.protocol, t.st.meta); err != nil {
		return fail(err)
	}
	conf := t.st.meta.Configuration
	switch {
	case conf[PropDeletionVectors] != "true" || !slices.Contains(t.st.protocol.ReaderFeatures, "deletionVectors"):
		return fail(fmt.Errorf("%w: the table does not enable deletion vectors", ErrUnsupported))
	case conf[PropChangeDataFeed] == "true":
		return fail(fmt.Errorf("%w: deletes on a change data feed table (change data files)", ErrUnsupported))
	case conf[PropAppendOnly] == "true":
		return fail(errors.New("the table is append-only"))
	}
	if c.AppID != "" {
		if x, ok := t.st.txns[c.AppID]; ok && x.Version >= c.Version {
			return Result{Version: t.st.version}, nil
		}
	}
	changes, paths, err := t.planDV(rows)
	if err != nil {
		return fail(err)
	}
	adds, err := t.writeData(ctx, recs)
	if err != nil {
		return fail(err)
	}
	drop := func() {
		for _, a := range adds {
			if p, err := t.filePath(a.add.Path); err == nil {
				os.Remove(p)
			}
		}
	}
	now := nowMs()
	var deleted int64
	for _, p := range paths {
		deleted += int64(len(rows[p]))
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			drop()
			return Result{}, err
		}
		v := t.st.version + 1
		acts := t.mutationActions(v-1, changes, nil, adds, c, now, deleted)
		data, err := encodeCommit(acts)
		if err != nil {
			drop()
			return Result{}, err
		}
		err = putIfAbsent(t.dir, v, data)
		var unsynced *unsyncedError
		if err == nil || errors.As(err, &unsynced) {
			t.st.apply(v, acts)
			if err != nil {
				return Result{Version: v, Committed: true}, fmt.Errorf("delete from Delta table %s: %w", t.dir, err)
			}
			return Result{Version: v, Committed: true}, t.maybeCheckpoint(v)
		}
		if !errors.Is(err, errVersionTaken) {
			drop()
			return fail(err)
		}
		if attempt == maxCommitAttempts {
			drop()
			return fail(fmt.Errorf("version %d taken after %d attempts: %w", v, attempt, ErrCommitConflict))
		}
		// A winner that removed one of the files conflicts (its rows may
		// have moved or gone); the rest is checkWinners'.
		for w := v; ; w++ {
			wacts, err := readCommit(t.dir, w)
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if err != nil {
				drop()
				return fail(err)
			}
			for _, a := range wacts {
				if a.Remove != nil && rows[a.Remove.Path] != nil {
					drop()
					if st, err := loadState(ctx, t.dir); err == nil {
						_ = t.setState(st)
					}
					return fail(fmt.Errorf("commit %d removed file %s concurrently: %w", w, a.Remove.Path, ErrCommitConflict))
				}
			}
		}
		res, done, err := t.checkWinners(v, c)
		if err != nil || done {
			drop()
			return res, err
		}
	}
}

// dvChange is a file whose deletion vector grows: its add, and the new
// vector (the union of the old one and the rows deleted).
type dvChange struct {
	old *Add
	dv  DeletionVector
}

// planDV returns the deletion vectors that delete rows (a file's add path
// -> positions in it) of the snapshot's files, and the paths in order
// (t.mu held).
func (t *Table) planDV(rows map[string][]int64) ([]dvChange, []string, error) {
	var changes []dvChange
	paths := make([]string, 0, len(rows))
	for p := range rows {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		f := t.activeFile(p)
		if f == nil {
			return nil, nil, fmt.Errorf("file %s is not in the table (version %d)", p, t.st.version)
		}
		n, ok := numRecords(f)
		if !ok {
			return nil, nil, fmt.Errorf("file %s has no numRecords statistic, which a deletion vector needs", p)
		}
		var del []uint64
		if dv, err := parseDV(f.DeletionVector); err != nil {
			return nil, nil, err
		} else if dv != nil {
			if del, err = dv.rows(); err != nil {
				return nil, nil, err
			}
		}
		for _, r := range rows[p] {
			if r < 0 || r >= n {
				return nil, nil, fmt.Errorf("file %s: row %d is not in its %d rows", p, r, n)
			}
			del = append(del, uint64(r))
		}
		slices.Sort(del)
		del = slices.Compact(del)
		changes = append(changes, dvChange{old: f, dv: inlineDV(del)})
	}
	return changes, paths, nil
}

// activeFile returns the snapshot's add of path, nil if none (t.mu held).
func (t *Table) activeFile(path string) *Add {
	for _, a := range t.st.files {
		if a.Path == path {
			return a
		}
	}
	return nil
}

// numRecords returns the numRecords statistic of a file.
func numRecords(a *Add) (int64, bool) {
	var st struct {
		NumRecords *int64 `json:"numRecords"`
	}
	if json.Unmarshal([]byte(a.Stats), &st) != nil || st.NumRecords == nil {
		return 0, false
	}
	return *st.NumRecords, true
}

// mutationActions returns the actions of a commit reading version read
// that grows deletion vectors (changes), removes files whole (removed),
// adds the files written, with the txn of c: DELETE when it only deletes,
// else MERGE.
func (t *Table) mutationActions(read int64, changes []dvChange, removed []*Add, adds []written, c Commit, now, deleted int64) []action {
	var numRows int64
	for _, a := range adds {
		numRows += a.numRecords
	}
	op := "DELETE"
	if len(adds) > 0 {
		op = "MERGE"
	}
	ci := map[string]any{
		"timestamp":     now,
		"operation":     op,
		"readVersion":   read,
		"isBlindAppend": false,
		"operationMetrics": map[string]any{
			"numDeletionVectorsAdded": fmt.Sprint(len(changes)),
			"numRemovedFiles":         fmt.Sprint(len(removed)),
			"numDeletedRows":          fmt.Sprint(deleted),
			"numOutputRows":           fmt.Sprint(numRows),
			"numFiles":                fmt.Sprint(len(adds)),
		},
		"engineInfo": engineInfo,
		"txnId":      uuid.NewString(),
	}
	if len(c.Props) > 0 {
		ci["userMetadata"] = mustJSON(c.Props)
	}
	acts := []action{{CommitInfo: ci}}
	if c.AppID != "" {
		acts = append(acts, action{Txn: &Txn{AppID: c.AppID, Version: c.Version, LastUpdated: &now}})
	}
	remove := func(a *Add) {
		size := a.Size
		acts = append(acts, action{Remove: &Remove{
			Path: a.Path, DeletionTimestamp: &now, DataChange: true, ExtendedFileMetadata: true,
			PartitionValues: a.PartitionValues, Size: &size, DeletionVector: a.DeletionVector,
		}})
	}
	for _, ch := range changes {
		remove(ch.old)
		dv, _ := json.Marshal(ch.dv)
		na := *ch.old
		na.DeletionVector, na.DataChange, na.ModificationTime = dv, true, now
		acts = append(acts, action{Add: &na})
	}
	for _, a := range removed {
		remove(a)
	}
	for _, a := range adds {
		acts = append(acts, action{Add: a.add})
	}
	return acts
}
