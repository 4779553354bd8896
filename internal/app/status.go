package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/export"
	lakepkg "github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
)

// TableStatus is one bronze table's state, as `tidemark status` prints it.
type TableStatus struct {
	Table            string `json:"table"`
	Snapshot         string `json:"snapshot"`
	SnapshotRows     int64  `json:"snapshot_rows"`
	SnapshotEstimate int64  `json:"snapshot_estimate"`
	Position         string `json:"position"`
	Watermark        string `json:"watermark"`
	// CompleteThrough answers "is [t0, t1) complete in bronze?": yes when
	// t1 <= CompleteThrough, reading the rows with cdc_ts in [t0, t1) and
	// cdc_source_lsn <= the checkpoint's tidemark.commit-lsn. It is the
	// checkpoint's watermark less CompletenessLateness, and empty while the
	// table's snapshot is not done (its rows carry earlier times).
	// docs/tail.md#is-t0-t1-complete-in-bronze.
	CompleteThrough string  `json:"complete_through"`
	LagBytes        int64   `json:"lag_bytes"`
	LagSeconds      float64 `json:"lag_seconds"`
	Snapshots       int     `json:"lake_snapshots"`
	// Silver is "published", "building", "building (pass i of n)" (a build in
	// passes, i committed), "gated: <reason>", "failing: [silver_merge_failing]
	// ..." (the named error of a merge that kept failing), "none (bronze
	// only)" (a table with no key: BronzeOnly) or "disabled/none".
	Silver       string `json:"silver"`
	SilverBehind int    `json:"silver_bronze_snapshots_behind"`
	// SilverChangesBehind is the changes (bronze rows) in those commits;
	// SilverBehindSeconds the age of the oldest of them (0: none).
	SilverChangesBehind int64   `json:"silver_changes_behind"`
	SilverBehindSeconds float64 `json:"silver_behind_seconds"`
	// Reread says why the table is being read again while a re-snapshot of
	// it runs: a rewrite at the source that emitted no change events
	// (detected by its relfilenode), or `tidemark resnapshot`.
	Reread string `json:"reread,omitempty"`
	// NotCaptured is, for a published table the capture leaves out on its
	// own (no key to merge by, a name the lake cannot hold), the named
	// error that says why and the fix; Table is then "<source>: schema.table".
	NotCaptured string `json:"not_captured,omitempty"`
	// BronzeOnly is, for a table captured with no key to merge by (bronze
	// only, no silver table: Silver is "none (bronze only)"), the named
	// error (no_primary_key) that says why and how to give it a key.
	BronzeOnly string `json:"bronze_only,omitempty"`
	// SilverCatchUpSeconds is the expected time to catch up: the changes
	// behind at the rate of the table's last merge steps (0: nothing
	// behind; null: no step recorded its rate yet).
	SilverCatchUpSeconds *float64 `json:"silver_catch_up_seconds"`
	// The figures of the metrics (docs/metrics.md) the lake holds, for
	// scripts (JSON only): the bronze table's rows (-1: unknown) and the
	// time of its latest snapshot, and whether silver is published.
	BronzeRows       int64  `json:"bronze_rows"`
	BronzeSnapshotAt string `json:"bronze_snapshot_at,omitempty"`
	SilverPublished  bool   `json:"silver_published"`
	// The footprints of the bronze and (published or building) silver
	// table: files, bytes, delete files, last maintenance and a warning
	// past the bound (docs/operations.md#footprint).
	BronzeFootprint *TableFootprint `json:"bronze_footprint,omitempty"`
	SilverFootprint *TableFootprint `json:"silver_footprint,omitempty"`
	// Warnings are the footprints' warnings, with the table they are of.
	Warnings []string `json:"warnings,omitempty"`
	// Gold is set on the row of a gold table (Table gold.<source>.<name>),
	// whose bronze and silver fields are empty.
	Gold *GoldStatus `json:"gold,omitempty"`
}

// CompletenessLateness is how far behind the checkpoint's watermark a time
// range must end to be complete in bronze: commit timestamps are not
// strictly in commit order (PostgreSQL takes one just before the commit
// record is written; MySQL's are whole seconds). `tidemark export` uses the
// same rule (export.DefaultLateness).
const CompletenessLateness = export.DefaultLateness

// Status reports every bronze table in the warehouse. With a source URL the
// WAL lag is measured live; otherwise it is the lag at the last checkpoint.
func Status(ctx context.Context, warehouse string, catalog, source config.Secret, format string, out io.Writer) error {
	cat, err := OpenLakeReadOnly(ctx, warehouse, catalog)
	if err != nil {
		return err
	}
	defer cat.Close()
	nss, err := cat.ListNamespaces(ctx)
	if err != nil {
		return err
	}
	var liveEnd uint64 // the source log's end now (with a source), else 0
	if !source.IsZero() {
		src, err := sourceFor(source.Reveal())
		if err != nil {
			return err
		}
		if src.logEnd != nil {
			if liveEnd, err = src.logEnd(ctx, source.Reveal()); err != nil {
				return config.RedactError(err, source)
			}
		}
	}
	var rows []TableStatus
	goldListed := map[string]bool{} // sources whose gold tables are listed
	for _, ns := range nss {
		if len(ns) == 2 && ns[0] == "bronze" {
			// The tables the capture leaves out, each with its named
			// error and fix (they have no bronze table to list).
			refused, err := bronze.Refused(ctx, cat, ns[1])
			if err != nil {
				return err
			}
			for _, r := range refused {
				rows = append(rows, TableStatus{Table: ns[1] + ": " + showSourceTable(r.Schema, r.Table),
					Snapshot: "not captured", SnapshotEstimate: -1, LagBytes: -1, LagSeconds: -1, Silver: "none", NotCaptured: r.Reason})
			}
			continue
		}
		if len(ns) != 3 || ns[0] != "bronze" {
			continue
		}
		cp, haveCP, err := bronze.LoadCheckpoint(ctx, cat, ns[1])
		if err != nil {
			return err
		}
		src := sourceNamed(cp.Info[pipeline.InfoSource])
		if !goldListed[ns[1]] {
			goldListed[ns[1]] = true
			gs, err := goldStatuses(ctx, cat, warehouse, ns[1], src)
			if err != nil {
				return err
			}
			rows = append(rows, gs...)
		}
		idents, err := cat.ListTables(ctx, ns)
		if err != nil {
			return err
		}
		keyless, err := bronze.BronzeOnly(ctx, cat, ns[1])
		if err != nil {
			return err
		}
		silverOf := map[string]silver.TableState{}
		if sts, err := silver.States(ctx, cat, ns[1]); err == nil {
			for _, s := range sts {
				silverOf[s.Bronze] = s
			}
		}
		for _, ident := range idents {
			tbl, err := cat.Open(ctx, ident)
			if err != nil {
				return err
			}
			sum := tbl.Summary()
			st := TableStatus{Table: strings.Join(ident, "."), Snapshots: snapshotCount(ctx, tbl), LagBytes: -1, LagSeconds: -1, Silver: "-", BronzeRows: -1}
			if n, err := strconv.ParseInt(sum["total-records"], 10, 64); err == nil {
				st.BronzeRows = n
			} else if mt, ok := tbl.(lakepkg.Maintained); ok {
				// Delta: from the active files' statistics.
				if fp, err := mt.Footprint(ctx); err == nil {
					st.BronzeRows = fp.Records - fp.DeletedRecords
				}
			}
			if cur, ok := tbl.CurrentSnapshot(); ok {
				st.BronzeSnapshotAt = time.UnixMilli(cur.TimestampMs).UTC().Format(time.RFC3339)
			}
			if st.BronzeFootprint, err = footprintOf(ctx, tbl, false); err != nil {
				return err
			}
			if w := st.BronzeFootprint; w != nil && w.Warning != "" {
				st.Warnings = append(st.Warnings, st.Table+": "+w.Warning)
			}
			if bronze.Keyless(tbl.Summary(), tbl.Properties()) {
				st.Silver = "none (bronze only)"
				st.BronzeOnly = "[no_primary_key] the source table has no key to merge by"
				for _, k := range keyless {
					if k.Schema == ident[2] && k.Table == ident[3] {
						st.BronzeOnly = k.Reason
					}
				}
			} else if ss, ok := silverOf[st.Table]; ok {
				switch {
				case ss.Failing != nil:
					st.Silver = ss.Failing.String()
				case ss.Gated:
					st.Silver = "gated: " + ss.Reason
				case ss.Building && ss.BuildPasses > 0:
					st.Silver = fmt.Sprintf("building (pass %d of %d)", ss.BuildPass, ss.BuildPasses)
				case ss.Building:
					st.Silver = "building"
				case ss.Published && len(ss.Filling) > 0:
					st.Silver = "published (giving older rows the default of " + strings.Join(ss.Filling, ", ") + ")"
				case ss.Published:
					st.Silver = "published"
				}
				st.SilverPublished = ss.Published
				if ss.Published || ss.Building {
					sid := silver.Ident(ident[1], ident[2], ident[3])
					if !ss.Published {
						sid = silver.BuildingIdent(ident[1], ident[2], ident[3])
					}
					if stbl, err := cat.Open(ctx, sid); err == nil {
						if st.SilverFootprint, err = footprintOf(ctx, stbl, true); err != nil {
							return err
						}
						if w := st.SilverFootprint; w != nil && w.Warning != "" {
							st.Warnings = append(st.Warnings, strings.Join(sid, ".")+": "+w.Warning)
						}
					}
				}
				st.SilverBehind = ss.Behind
				st.SilverChangesBehind = ss.Backlog.Changes
				st.SilverBehindSeconds = float64(int64(ss.Backlog.Seconds(time.Now())*10)) / 10
				if eta, ok := ss.Backlog.CatchUp(ss.MergeRate); ok {
					sec := float64(int64(eta.Seconds()*10)) / 10
					st.SilverCatchUpSeconds = &sec
				}
			}
			sp, _ := pipeline.ParseSnapshotState(sum[pipeline.PropSnapshot])
			st.Snapshot, st.SnapshotRows, st.SnapshotEstimate = sp.Status, sp.Rows, sp.Estimate
			if sp.Request != "" && sp.Status != pipeline.SnapshotDone && sp.Status != pipeline.SnapshotSkipped {
				st.Reread = sum[pipeline.PropResnapshotReason]
				if st.Reread == "" {
					st.Reread = "requested by `tidemark resnapshot`"
				}
			}
			pos, _ := strconv.ParseUint(sum[bronze.PropPosition], 10, 64)
			wm, _ := time.Parse(time.RFC3339Nano, sum[bronze.PropWatermark])
			if haveCP {
				// Every table holds every change up to the source checkpoint.
				if cp.Pos > pos {
					pos = cp.Pos
				}
				if cp.Watermark.After(wm) {
					wm = cp.Watermark
				}
				_, st.LagBytes = src.position(cp, liveEnd)
			}
			if pos > 0 {
				st.Position = src.formatPos(pos)
			}
			if haveCP && !cp.Watermark.IsZero() && (sp.Status == pipeline.SnapshotDone || sp.Status == pipeline.SnapshotSkipped) {
				st.CompleteThrough = cp.Watermark.Add(-CompletenessLateness).UTC().Format(time.RFC3339Nano)
			}
			if !wm.IsZero() {
				st.Watermark = wm.UTC().Format(time.RFC3339)
				st.LagSeconds = lagSeconds(wm)
			}
			rows = append(rows, st)
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Table < rows[j].Table })
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tSNAPSHOT\tROWS\tESTIMATE\tPOSITION\tWATERMARK\tLAG_BYTES\tLAG_S\tFILES\tBYTES\tMAINTAINED\tSILVER")
	for _, r := range rows {
		if r.Gold != nil {
			continue // printGold
		}
		est := "-"
		if r.SnapshotEstimate >= 0 {
			est = strconv.FormatInt(r.SnapshotEstimate, 10)
		}
		sil := r.Silver
		if r.SilverBehind > 0 {
			eta := ""
			if r.SilverCatchUpSeconds != nil && r.SilverChangesBehind > 0 {
				d := time.Duration(*r.SilverCatchUpSeconds * float64(time.Second)).Round(time.Second)
				eta = fmt.Sprintf(", about %s to catch up", d)
				if d < time.Second {
					eta = ", under a second to catch up"
				}
			}
			sil += fmt.Sprintf(" (%d bronze commits, %d changes to merge, oldest %.0fs%s)", r.SilverBehind, r.SilverChangesBehind, r.SilverBehindSeconds, eta)
		}
		files, bytes, maint := footprintCells(r.BronzeFootprint, r.SilverFootprint)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Table, r.Snapshot, r.SnapshotRows, est,
			dash(r.Position), dash(r.Watermark), num(r.LagBytes), numf(r.LagSeconds), files, bytes, maint, sil)
	}
	var warnings []string
	for _, r := range rows {
		warnings = append(warnings, r.Warnings...)
	}
	if len(rows) == 0 {
		fmt.Fprintln(tw, "(no bronze tables in "+warehouse+")")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := printGold(out, rows); err != nil {
		return err
	}
	for _, r := range rows {
		if r.Reread != "" {
			if _, err := fmt.Fprintf(out, "%s: being read again: %s\n", r.Table, r.Reread); err != nil {
				return err
			}
		}
	}
	// Why each table left out is: below the table, one line each (a reason
	// with its fix is too long for a column).
	for _, r := range rows {
		if r.NotCaptured != "" {
			if _, err := fmt.Fprintf(out, "not captured: %s: %s\n", r.Table, r.NotCaptured); err != nil {
				return err
			}
		}
	}
	for _, r := range rows {
		if r.BronzeOnly != "" {
			if _, err := fmt.Fprintf(out, "bronze only, no silver: %s: %s\n", r.Table, r.BronzeOnly); err != nil {
				return err
			}
		}
	}
	for _, w := range warnings {
		if _, err := fmt.Fprintln(out, "WARNING: footprint of "+w); err != nil {
			return err
		}
	}
	return nil
}

// showSourceTable is schema.table as tables: takes it, Go-quoted when it
// holds a control character (a newline would split the line).
func showSourceTable(schema, table string) string {
	if strings.IndexFunc(schema+table, unicode.IsControl) >= 0 {
		return fmt.Sprintf("%q.%q", schema, table)
	}
	return config.TableName{Schema: schema, Table: table}.String()
}

// footprintCells renders the footprints of a bronze table and its silver
// table (nil: none) as the FILES, BYTES and MAINTAINED cells: bronze/silver,
// silver's files as data+delete and its bytes with their ratio to live.
func footprintCells(b, s *TableFootprint) (files, bytes, maint string) {
	f := func(fp *TableFootprint, silver bool) (string, string, string) {
		if fp == nil {
			return "-", "-", "-"
		}
		files := strconv.Itoa(fp.DataFiles)
		if silver || fp.DeleteFiles > 0 {
			files += "+" + strconv.Itoa(fp.DeleteFiles)
		}
		bytes := humanBytes(fp.Bytes())
		if silver && fp.LiveBytes > 0 {
			bytes += fmt.Sprintf(" (%.1fx)", fp.Ratio)
		}
		m := "-"
		if fp.LastMaintenance != "" {
			m = fp.LastMaintenance
		}
		return files, bytes, m
	}
	bf, bb, bm := f(b, false)
	sf, sb, sm := f(s, true)
	return bf + "/" + sf, bb + "/" + sb, bm + "/" + sm
}

// humanBytes renders n bytes in binary units (B, KiB, MiB, GiB, TiB).
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + "B"
	}
	v, u := float64(n)/unit, 0
	for v >= unit && u < 3 {
		v /= unit
		u++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + []string{"KiB", "MiB", "GiB", "TiB"}[u]
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func num(n int64) string {
	if n < 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

func numf(f float64) string {
	if f < 0 {
		return "-"
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}

// snapshotCount is the number of snapshots a table's metadata holds
// (Iceberg), or of commits its log holds (Delta: Footprint).
func snapshotCount(ctx context.Context, tbl lakepkg.Table) int {
	if t, ok := tbl.(interface{ SnapshotCount() int }); ok {
		return t.SnapshotCount()
	}
	if mt, ok := tbl.(lakepkg.Maintained); ok {
		if fp, err := mt.Footprint(ctx); err == nil {
			return fp.Snapshots
		}
	}
	return 0
}
