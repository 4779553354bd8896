package silver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// A source table's silver table is published only once its initial
// snapshot is complete: a half-snapshotted replica would answer queries
// with rows missing and nothing to say so. The gate reads the snapshot
// progress bronze commits with every snapshot chunk (tidemark.snapshot).

// gate reports whether a bronze snapshot summary says the table's initial
// snapshot is complete ("done", or "skipped" when snapshots are disabled),
// and if not, why, in words for an operator.
func gate(summary map[string]string) (open bool, reason string) {
	raw, ok := summary[pipeline.PropSnapshot]
	if !ok {
		return false, "the initial snapshot has not started (bronze records no snapshot progress yet)"
	}
	sp, err := pipeline.ParseSnapshotState(raw)
	if err != nil {
		return false, fmt.Sprintf("bronze's snapshot progress is unreadable (%v): %q", err, raw)
	}
	switch sp.Status {
	case "done", "skipped":
		return true, ""
	case "running":
		if sp.Estimate > 0 {
			return false, fmt.Sprintf("the initial snapshot is running (%d of about %d rows)", sp.Rows, sp.Estimate)
		}
		return false, fmt.Sprintf("the initial snapshot is running (%d rows so far)", sp.Rows)
	case "pending", "":
		return false, "the initial snapshot has not started"
	}
	return false, fmt.Sprintf("the initial snapshot is %q", sp.Status)
}

// TableState is what `tidemark status` shows of one source table's silver.
type TableState struct {
	Bronze string `json:"bronze"` // bronze.<source>.<schema>.<table>
	Silver string `json:"silver"` // silver.<source>.<schema>.<table>
	// Published: the silver table exists. Building: it is being built (its
	// initial snapshot is complete, the merge has not caught up with it).
	Published bool `json:"published"`
	Building  bool `json:"building"`
	// BuildPass of BuildPasses: the passes a build in passes has committed,
	// of how many (0 of 0: not in passes, or none committed yet).
	BuildPass   int `json:"build_pass,omitempty"`
	BuildPasses int `json:"build_passes,omitempty"`
	// BronzeOnly: the source table has no key to merge by, so there is no
	// silver table (bronze.Keyless); Reason says so.
	BronzeOnly bool `json:"bronze_only,omitempty"`
	// Gated: the silver table is held back; Reason says why.
	Gated  bool   `json:"gated"`
	Reason string `json:"reason,omitempty"`
	// Cursor is the bronze snapshot silver merged through (0: none), and
	// Position / Behind what it holds: the source's commit position (the
	// integer of cdc_source_lsn, in decimal; each source formats its own)
	// and how many bronze snapshots wait to be merged.
	Cursor   int64  `json:"bronze_snapshot,omitempty"`
	Position string `json:"position,omitempty"`
	Behind   int    `json:"bronze_snapshots_behind"`
	// Failing: the table's merges failed the same way DefaultMaxFailures
	// times in a row (fault.ErrSilverMergeFailing), until one succeeds.
	Failing *Failing `json:"failing,omitempty"`
	// Filling names the columns added at the source with a default whose
	// older silver rows are still being given it (defaults.go).
	Filling []string `json:"filling_defaults,omitempty"`
	// Backlog is what waits to be merged: commits (Behind), changes and
	// the age of the oldest (backlog.go).
	Backlog Backlog `json:"backlog"`
	// MergeRate is the bronze rows per second of the table's last merge
	// steps (0: none recorded; backlog.go); Backlog.CatchUp(MergeRate) is
	// the time the backlog should take to merge.
	MergeRate float64 `json:"merge_rate,omitempty"`
}

// States reports the silver state of every bronze table of source, sorted
// by table. It only reads.
func States(ctx context.Context, cat lake.Catalog, source string) ([]TableState, error) {
	tables, err := bronze.Tables(ctx, cat, source)
	if err != nil {
		return nil, err
	}
	var out []TableState
	for _, id := range tables {
		st, err := State(ctx, cat, source, id.Schema, id.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// State reports the silver state of one source table.
func State(ctx context.Context, cat lake.Catalog, source, schema, table string) (TableState, error) {
	bid := append(bronze.Namespace(source, schema), table)
	st := TableState{Bronze: strings.Join(bid, "."), Silver: strings.Join(Ident(source, schema, table), ".")}
	if f, err := readFailing(cat.Warehouse(), st.Silver); err != nil {
		return st, err
	} else {
		st.Failing = f
	}
	b, err := cat.Open(ctx, bid)
	if err != nil {
		return st, err
	}
	s, err := cat.Open(ctx, Ident(source, schema, table))
	if errors.Is(err, lake.ErrNoSuchTable) {
		s, err = cat.Open(ctx, buildingIdent(source, schema, table))
		st.Building = err == nil
	} else {
		st.Published = err == nil
	}
	if err != nil && !errors.Is(err, lake.ErrNoSuchTable) {
		return st, err
	}
	cur, haveCur := b.CurrentSnapshot()
	if s == nil && bronze.Keyless(b.Summary(), b.Properties()) {
		st.BronzeOnly, st.Reason = true, "the source table has no key to merge by: bronze only, no silver table"
		return st, nil
	}
	if s == nil {
		st.Gated = true
		if !haveCur {
			st.Reason = "bronze has no commit yet"
		} else if open, why := gate(cur.Props); !open {
			st.Reason = why
		} else {
			st.Gated, st.Reason = false, "the initial snapshot is complete; the next merge builds the silver table"
		}
		return st, nil
	}
	st.Filling = fillPending(s)
	c, err := cursorOf(s)
	if err != nil {
		return st, err
	}
	if c != lake.NoSnapshot {
		st.Cursor = c
	}
	if sum := s.Summary(); st.Building && sum[propBuildTarget] != "" && c == lake.NoSnapshot {
		last, err1 := strconv.Atoi(sum[propBuildPass])
		n, err2 := strconv.Atoi(sum[propBuildPasses])
		if err1 == nil && err2 == nil {
			st.BuildPass, st.BuildPasses = last+1, n
		}
	}
	st.Position = s.Summary()[PropPosition]
	if haveCur {
		if h, err := b.History(c, cur.ID); err == nil {
			st.Behind = len(h)
			st.Backlog = backlogOf(h)
		}
		st.MergeRate, _ = mergeRate(s)
		if id := resnapshotPending(cur, s.Summary()); id != "" && st.Published {
			st.Gated, st.Reason = true, fmt.Sprintf("re-snapshot %s is complete; the next merge replaces the silver rows", id)
			if open, why := resnapshotGate(cur, id); !open {
				st.Reason = why
			}
		}
		if key, err := KeyOf(b); err == nil && st.Published {
			if have := keyOfTable(s); have != nil && !slices.Equal(have, key) {
				// A key change: rebuilt beside it (rekey.go).
				st.Gated, st.Reason = true, rekeyReason(cur, have, key)
			}
		}
	}
	return st, nil
}
