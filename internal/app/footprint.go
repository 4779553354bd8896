package app

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/maintain"
	"github.com/tidemark/tidemark/internal/silver"
)

// TableFootprint is what a lake table's current snapshot costs, as
// `tidemark status` shows it (docs/operations.md#footprint).
type TableFootprint struct {
	lake.Footprint
	// LiveBytes estimates the bytes of the live rows (lake.Footprint.LiveBytes).
	LiveBytes int64 `json:"live_bytes"`
	// Silver only: Ratio is the bytes of the files over LiveBytes,
	// FileBound the most data+delete files the table should hold.
	Ratio     float64 `json:"ratio,omitempty"`
	FileBound int     `json:"file_bound,omitempty"`
	// Bronze only: the data files appended since its last compaction.
	AppendedSinceCompaction int `json:"appended_since_compaction,omitempty"`
	// LastMaintenance is the time of the table's latest compaction still in
	// its history (RFC 3339; "" none kept).
	LastMaintenance string `json:"last_maintenance,omitempty"`
	// Warning says which bound the footprint passes ("" none).
	Warning string `json:"warning,omitempty"`
}

// bronzeWarnAppended: a bronze table with more data files appended since
// its last compaction than this is warned about; `tidemark run` compacts
// at maintain.BronzeCompactFiles, checking every maintain.DefaultCheckEvery.
const bronzeWarnAppended = 4 * maintain.BronzeCompactFiles

// footprintOf measures t; silver says whether it is a silver table (judged
// by silver.CheckFootprint) or an append-only one.
func footprintOf(ctx context.Context, t lake.Table, isSilver bool) (*TableFootprint, error) {
	mt, ok := t.(lake.Maintained)
	if !ok {
		return nil, nil
	}
	out := &TableFootprint{}
	last, appended := lastCompaction(t)
	if !last.IsZero() {
		out.LastMaintenance = last.UTC().Format(time.RFC3339)
	}
	if isSilver {
		c, err := silver.CheckFootprint(ctx, mt)
		if err != nil {
			return nil, err
		}
		out.Footprint, out.Ratio, out.FileBound, out.Warning = c.Footprint, float64(int64(c.Ratio*100))/100, c.FileBound, c.Over
	} else {
		fp, err := mt.Footprint(ctx)
		if err != nil {
			return nil, err
		}
		out.Footprint, out.AppendedSinceCompaction = fp, appended
		if appended > bronzeWarnAppended {
			out.Warning = fmt.Sprintf("%d data files appended since the last compaction (bound %d: is `tidemark run` maintaining it?)",
				appended, bronzeWarnAppended)
		}
	}
	out.LiveBytes = out.Footprint.LiveBytes()
	return out, nil
}

// lastCompaction walks t's history back from its current snapshot to its
// latest compaction (operation "replace"): its time (zero: none kept) and
// how many rows-appending snapshots followed it.
func lastCompaction(t lake.Table) (time.Time, int) {
	cur, ok := t.CurrentSnapshot()
	appended := 0
	for ok {
		if cur.Operation == "replace" {
			return time.UnixMilli(cur.TimestampMs), appended
		}
		if cur.Operation == "append" && cur.AddedRecords > 0 {
			appended++
		}
		if cur.ParentID == lake.NoSnapshot {
			break
		}
		var err error
		cur, err = t.Snapshot(cur.ParentID)
		ok = err == nil
	}
	return time.Time{}, appended
}
