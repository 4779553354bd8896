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
	// The new deletion vectors, from the snapshot's files.
	type change struct {
		old *Add
		dv  DeletionVector
	}
	var changes []change
	paths := make([]string, 0, len(rows))
	for p := range rows {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		var f *Add
		for _, a := range t.st.files {
			if a.Path == p {
				f = a
			}
		}
		if f == nil {
			return fail(fmt.Errorf("file %s is not in the table (version %d)", p, t.st.version))
		}
		var st struct {
			NumRecords *int64 `json:"numRecords"`
		}
		if json.Unmarshal([]byte(f.Stats), &st) != nil || st.NumRecords == nil {
			return fail(fmt.Errorf("file %s has no numRecords statistic, which a deletion vector needs", p))
		}
		var del []uint64
		if dv, err := parseDV(f.DeletionVector); err != nil {
			return fail(err)
		} else if dv != nil {
			if del, err = dv.rows(); err != nil {
				return fail(err)
			}
		}
		for _, r := range rows[p] {
			if r < 0 || r >= *st.NumRecords {
				return fail(fmt.Errorf("file %s: row %d is not in its %d rows", p, r, *st.NumRecords))
			}
			del = append(del, uint64(r))
		}
		slices.Sort(del)
		del = slices.Compact(del)
		changes = append(changes, change{old: f, dv: inlineDV(del)})
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
	var numRows int64
	for _, a := range adds {
		numRows += a.numRecords
	}
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
		op := "DELETE"
		if len(adds) > 0 {
			op = "MERGE"
		}
		ci := map[string]any{
			"timestamp":     now,
			"operation":     op,
			"readVersion":   v - 1,
			"isBlindAppend": false,
			"operationMetrics": map[string]any{
				"numDeletionVectorsAdded": fmt.Sprint(len(changes)),
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
		for _, ch := range changes {
			size := ch.old.Size
			acts = append(acts, action{Remove: &Remove{
				Path: ch.old.Path, DeletionTimestamp: &now, DataChange: true, ExtendedFileMetadata: true,
				PartitionValues: ch.old.PartitionValues, Size: &size, DeletionVector: ch.old.DeletionVector,
			}})
			dv, _ := json.Marshal(ch.dv)
			na := *ch.old
			na.DeletionVector, na.DataChange, na.ModificationTime = dv, true, now
			acts = append(acts, action{Add: &na})
		}
		for _, a := range adds {
			acts = append(acts, action{Add: a.add})
		}
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
