package silver

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// This file applies a re-snapshot (`tidemark resnapshot`) to silver.
//
// The request is an empty bronze commit, the marker, whose summary sets
// tidemark.snapshot back to "pending" and tidemark.resnapshot to the
// request's id; bronze carries the id forward in every later commit. After
// the marker, bronze holds a fresh `r` row for every key the source holds
// (read at or after the marker) plus the changes streamed since. What it
// does not hold is just as important: keys deleted while the slot was gone
// (or rows silver drifted on) have nothing after the marker.
//
// So the rule is: while the re-snapshot runs, silver is gated (not merged:
// it keeps the state it had before the request, and `tidemark status`
// says why). Once bronze records the snapshot complete, silver REPLACES
// its rows, in one commit, with the fold of everything bronze appended
// after the marker, up to a snapshot that ends on a transaction boundary:
// every row older than the request is deleted, every key the source holds
// is written from its re-snapshot row and the changes after it. Readers see
// the old table or the new one, never a mix. The commit records the
// request id (tidemark.resnapshot) beside silver's cursor, so it is applied
// once; a crash before the commit redoes it, after it changes nothing.
//
// Like the initial build, that range is folded at once (bronze's order is
// the source's only once the snapshot is complete), so its memory grows
// with the table's size; MaxChanges does not split it.
//
// With soft deletes, the replaced table holds the source's live rows only:
// tombstones from before the request, and keys deleted while the slot was
// gone, are not kept as cdc_deleted rows.

// PropResnapshot is the id of the last re-snapshot request a silver table
// has applied (bronze's tidemark.resnapshot, copied with the cursor).
const PropResnapshot = pipeline.PropResnapshot

// resnapshotPending returns the id of a re-snapshot request bronze's head
// carries that the silver table (summary sum) has not applied, or "".
func resnapshotPending(head lake.Snapshot, sum map[string]string) string {
	id := head.Props[PropResnapshot]
	if id == "" || sum[PropResnapshot] == id {
		return ""
	}
	return id
}

// resnapshotGate is gate for a published table with a pending re-snapshot.
func resnapshotGate(head lake.Snapshot, id string) (open bool, reason string) {
	open, why := gate(head.Props)
	if open {
		return true, ""
	}
	return false, fmt.Sprintf("re-snapshot %s in progress (%s); silver keeps its state from before the request", id, why)
}

// marker returns the bronze snapshot that recorded request id: the oldest
// snapshot of head's history that carries it. Rows of the re-snapshot are
// appended after it.
func marker(b lake.Table, head lake.Snapshot, id string) (int64, error) {
	m := head
	for m.ParentID != lake.NoSnapshot {
		p, err := b.Snapshot(m.ParentID)
		if errors.Is(err, lake.ErrSnapshotNotFound) {
			break // expired: m is the oldest snapshot left, and it carries id
		}
		if err != nil {
			return 0, err
		}
		if p.Props[PropResnapshot] != id {
			break
		}
		m = p
	}
	return m.ID, nil
}

// buildFrom is the bronze snapshot a first build of the silver table reads
// after: the marker of the latest re-snapshot request when bronze carries
// one (what came before it is superseded), else the start of bronze.
func buildFrom(b lake.Table, target lake.Snapshot) (int64, error) {
	if id := target.Props[PropResnapshot]; id != "" {
		return marker(b, target, id)
	}
	return lake.NoSnapshot, nil
}

// resnapshot applies request id to the published silver table: gated
// while bronze's re-snapshot runs, then one commit that replaces silver's
// rows (see the file comment). wait reports that there is nothing to do
// yet (res says why when gated).
func (j *job) resnapshot(ctx context.Context, head lake.Snapshot, id string) (wait bool, err error) {
	if open, why := resnapshotGate(head, id); !open {
		j.res.Gated, j.res.Reason = true, why
		return true, nil
	}
	from, err := marker(j.b, head, id)
	if err != nil {
		return false, err
	}
	hist, err := j.b.History(from, head.ID)
	if err != nil {
		return false, err
	}
	for i := len(hist) - 1; i >= 0; i-- {
		if open, _ := gate(hist[i].Props); !open {
			break
		}
		_, complete, err := j.complete(ctx, from, hist[i])
		if err != nil {
			return false, err
		}
		if !complete {
			continue
		}
		j.replace = true
		defer func() { j.replace = false }()
		if err := j.merge(ctx, from, hist[i], part{}, false, cursorProps(hist[i])); err != nil {
			return false, err
		}
		j.m.log.Info("silver replaced from a re-snapshot", "table", j.res.Table, "request", id,
			"bronze_from", from, "bronze_snapshot", hist[i].ID, "rows", j.res.Upserts)
		return false, nil
	}
	j.res.Gated, j.res.Reason = true, fmt.Sprintf("re-snapshot %s is complete; waiting for bronze to hold a whole transaction", id)
	return true, nil
}

// everyRow selects every row of a silver table (positions are below
// MaxInt64): a re-snapshot's commit deletes them all.
func everyRow() *lake.Filter {
	return lake.Or(lake.Less(ColLSN, int64(math.MaxInt64)), lake.Equal(ColLSN, int64(math.MaxInt64)))
}
