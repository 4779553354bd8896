package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/source/postgres"
)

// ResnapshotOptions say what `tidemark resnapshot` re-reads.
type ResnapshotOptions struct {
	Tables []string // schema.table
	All    bool     // every captured table
	// ResetSlot replaces the slot even when it looks healthy (with All): for
	// a stream tidemark cannot decode past (corrupt_state).
	ResetSlot bool
	// Replace rebuilds the named tables under their current source schema
	// (after an incompatible change, incompatible_schema): their bronze and
	// silver tables are moved to bronze.ReplacedIdent, and the next run
	// creates them afresh and reads them through the snapshot, skipping the
	// stream's changes of those tables from before the request.
	Replace bool
}

// slotCodes are the errors of a slot or publication the pipeline can no
// longer stream from; a re-snapshot of every table with a new slot repairs them.
var slotCodes = []*fault.Error{fault.ErrSlotLost, fault.ErrWALLost, fault.ErrSlotMoved, fault.ErrPublicationMissing}

// Resnapshot records, for a stopped pipeline, the operator's request to read
// tables again (ARCHITECTURE §3: a re-snapshot is never silent). It takes
// the pipeline's one-writer lock (a running pipeline makes it fail with
// already_running), marks each table's bronze snapshot state pending under
// a new request id, and, when the slot cannot resume (slot_lost, wal_lost,
// slot_moved, publication_missing, an unreadable checkpoint) or ResetSlot
// asks for it, replaces the slot and resets the checkpoint to the new
// slot's start, which needs All. It writes what it did and what run will
// do next to out. It moves no data: the next `tidemark run` reads the
// tables through the ordinary chunked snapshot, and silver applies each one
// when it is complete (internal/silver, resnapshot.go).
func Resnapshot(ctx context.Context, cfg *config.Config, opts ResnapshotOptions, out io.Writer, log *slog.Logger) (err error) {
	defer func() { err = config.RedactError(err, cfg.Secrets()...) }()
	switch {
	case opts.All && len(opts.Tables) > 0:
		return fault.With(fault.ErrBadConfig, "give either --all or table names, not both", nil)
	case !opts.All && len(opts.Tables) == 0:
		return fault.With(fault.ErrBadConfig, "name the tables to re-snapshot (schema.table …), or --all", nil)
	case opts.ResetSlot && !opts.All:
		return fault.With(fault.ErrBadConfig, "--reset-slot re-reads every table: it needs --all", nil)
	case opts.Replace && opts.All:
		return fault.With(fault.ErrBadConfig, "--replace rebuilds the tables it is given: name them (schema.table …) instead of --all", nil)
	}
	format := ""
	if IsDeltaLake(cfg.Warehouse) {
		format = config.LakeDelta
	}
	if err := CheckLake(cfg.Warehouse, cfg.Catalog, format); err != nil {
		return fault.With(fault.ErrBadConfig, err.Error(), nil)
	}
	cat, err := OpenLakeAt(ctx, cfg.Warehouse, cfg.Catalog)
	if err != nil {
		return err
	}
	defer cat.Close()
	captured, err := bronze.Tables(ctx, cat, cfg.Name)
	if err != nil {
		return err
	}
	if len(captured) == 0 && !opts.Replace {
		return fault.With(fault.ErrBadConfig, fmt.Sprintf("warehouse %s holds no bronze table of pipeline %q: nothing to re-snapshot (check --name and --warehouse)", cat.Warehouse(), cfg.Name), nil)
	}
	if src, err := sourceFor(cfg.Source.Reveal()); err != nil {
		return err
	} else if src.name == "mysql" {
		return resnapshotMySQL(ctx, cfg, opts, cat, captured, out, log)
	}
	dialer, err := postgres.NewDialer(cfg.Source.Reveal(), config.RedactURL)
	if err != nil {
		return err
	}
	copts, err := captureOptions(cfg)
	if err != nil {
		return err
	}
	admin, err := postgres.OpenAdmin(ctx, dialer, copts, log)
	if err != nil {
		return err
	}
	defer admin.Close()

	// Why the slot must be replaced, if it must.
	var problem error
	cp, haveCP, cpErr := bronze.LoadCheckpoint(ctx, cat, cfg.Name)
	switch {
	case errors.Is(cpErr, fault.ErrCorruptState):
		problem = cpErr
	case cpErr != nil:
		return cpErr
	default:
		if _, perr := admin.Check(ctx, cp, haveCP); perr != nil {
			if !slices.ContainsFunc(slotCodes, func(c *fault.Error) bool { return errors.Is(perr, c) }) {
				return perr
			}
			problem = perr
		}
	}
	reset := problem != nil || opts.ResetSlot
	if problem != nil && opts.Replace {
		return fault.With(fault.ErrBadConfig, fmt.Sprintf(
			"the pipeline cannot resume from its slot, so every table must be read again: run `tidemark resnapshot --all` first, then --replace (the problem: [%s] %v)",
			codeOf(problem), problem), nil)
	}
	if problem != nil && !opts.All {
		return fault.With(fault.ErrBadConfig, fmt.Sprintf(
			"the pipeline cannot resume from its slot, so every table must be read again: rerun as `tidemark resnapshot --all` with the same flags (the problem: [%s] %v)",
			codeOf(problem), problem), nil)
	}
	if reset {
		if _, err := admin.EnsurePublication(ctx); err != nil {
			return err
		}
	}
	published, err := admin.PublishedTables(ctx)
	if err != nil {
		return err
	}
	var tables, skipped []change.TableID
	if opts.All {
		for _, t := range captured {
			if slices.Contains(published, t) {
				tables = append(tables, t)
			} else {
				skipped = append(skipped, t)
			}
		}
	} else {
		named, err := ParseTables(opts.Tables)
		if err != nil {
			return err
		}
		for _, t := range named {
			switch {
			case !slices.Contains(captured, t) && !opts.Replace:
				return fault.With(fault.ErrBadConfig, fmt.Sprintf("pipeline %q has no bronze table for %s: is it captured (see `tidemark status`)?", cfg.Name, t), nil)
			case !slices.Contains(published, t):
				return fault.With(fault.ErrBadConfig, fmt.Sprintf("%s is not in publication %q, so run would never read it: add it (ALTER PUBLICATION %s ADD TABLE …) first",
					t, cfg.Publication, cfg.Publication), nil)
			}
			if !slices.Contains(tables, t) {
				tables = append(tables, t)
			}
		}
	}

	id := requestID(time.Now())
	fmt.Fprintf(out, "re-snapshot %s of pipeline %q:\n", id, cfg.Name)
	if problem != nil {
		fmt.Fprintf(out, "  slot %s cannot resume: [%s] %v\n", cfg.Slot, codeOf(problem), config.RedactError(problem, cfg.Secrets()...))
	}
	if opts.Replace {
		before, err := admin.CurrentLSN(ctx)
		if err != nil {
			return err
		}
		return replaceTables(ctx, cat, cfg.Name, tables, id, before, postgres.FormatLSN, out)
	}
	// Every table is marked before the slot is replaced: a crash in between
	// leaves a pipeline that still refuses to start, never one that streams
	// from the new slot with a table that skipped the gap.
	for _, t := range tables {
		snap, err := bronze.RequestSnapshot(ctx, cat, cfg.Name, t, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %s: snapshot state reset to pending (%s, snapshot %d)\n", t, strings.Join(bronze.Ident(cfg.Name, t), "."), snap)
	}
	for _, t := range skipped {
		fmt.Fprintf(out, "  %s: not in publication %q: not re-read (its lake tables stay as they are)\n", t, cfg.Publication)
	}
	if reset {
		lsn, dropped, err := admin.ReplaceSlot(ctx)
		if err != nil {
			return err
		}
		w, err := bronze.NewWriter(ctx, cat, cfg.Name, cfg.Slot, log)
		if err != nil {
			return err
		}
		// The watermark stays where the old stream left it (the source is
		// not captured further until the re-snapshot); an unreadable one is
		// replaced.
		wm := cp.Watermark
		if wm.IsZero() {
			wm = time.Now().UTC()
		}
		err = w.Flush(ctx, postgres.NewCheckpoint(lsn, 0, wm, 0, cfg.Slot))
		w.Close()
		if err != nil {
			return fmt.Errorf("replication slot %q was created at %s, but the checkpoint could not be reset (rerun `tidemark resnapshot --all`): %w",
				cfg.Slot, postgres.FormatLSN(lsn), err)
		}
		if dropped > 0 {
			fmt.Fprintf(out, "  slot %s: dropped (it was at %s)\n", cfg.Slot, postgres.FormatLSN(dropped))
		}
		fmt.Fprintf(out, "  slot %s: created at %s; checkpoint reset to it (was %s)\n", cfg.Slot, postgres.FormatLSN(lsn), postgres.FormatLSN(postgres.AckedLSN(cp)))
	}
	fmt.Fprintf(out, "next: `tidemark run` with the same flags reads %d table(s) again in chunks while it streams\n", len(tables))
	fmt.Fprintf(out, "  (progress: `snapshot progress` log lines and `tidemark status`). Until a table's re-snapshot is\n")
	fmt.Fprintf(out, "  complete its silver table keeps its state from before this request; then one merge replaces it.\n")
	if reset {
		fmt.Fprintf(out, "  The new slot holds WAL from now on: start `tidemark run` soon.\n")
	}
	return nil
}

// replaceTables moves the bronze and silver tables of tables aside
// (bronze.ReplacedIdent) and marks where the tables created in their
// place start to take the stream (bronze.MarkReplaced): at before, the
// source's log position now (PostgreSQL: its WAL insert position; MySQL:
// its binlog end), formatted by formatPos, which is above every change
// made before this request,
// so the stream's older changes of these tables (those written under the
// schema they were replaced for) are skipped; the new tables' snapshot,
// read by the next run, holds their effect. The mark goes first: a crash
// before the moves leaves the old tables in use (a table with commits
// ignores the mark), and the request can be made again.
func replaceTables(ctx context.Context, cat lake.Catalog, source string, tables []change.TableID, id string, before uint64, formatPos func(uint64) string, out io.Writer) error {
	for _, t := range tables {
		if err := bronze.MarkReplaced(ctx, cat, source, t, before); err != nil {
			return err
		}
		for _, layer := range []struct {
			name  string
			ident []string
		}{{"silver", silver.Ident(source, t.Schema, t.Name)}, {"bronze", bronze.Ident(source, t)}} {
			to := bronze.ReplacedIdent(layer.name, source, t, id)
			if err := cat.EnsureNamespace(ctx, to[:len(to)-1]); err != nil {
				return err
			}
			_, err := cat.Rename(ctx, layer.ident, to)
			switch {
			case errors.Is(err, lake.ErrNoSuchTable):
				fmt.Fprintf(out, "  %s: no %s table %s to move\n", t, layer.name, strings.Join(layer.ident, "."))
			case err != nil:
				return fmt.Errorf("%s: move %s table %s to %s: %w", t, layer.name, strings.Join(layer.ident, "."), strings.Join(to, "."), err)
			default:
				fmt.Fprintf(out, "  %s: %s table %s moved to %s (kept as it was; drop it when no longer wanted)\n",
					t, layer.name, strings.Join(layer.ident, "."), strings.Join(to, "."))
			}
		}
		// A silver table being built (a first build, or a rebuild on a new
		// key) was built from the old bronze table: its cursor means nothing
		// in the new one. It holds nothing bronze does not, so it is dropped
		// and built again from the new bronze table.
		building := silver.BuildingIdent(source, t.Schema, t.Name)
		switch err := cat.Drop(ctx, building); {
		case errors.Is(err, lake.ErrNoSuchTable):
		case err != nil:
			return fmt.Errorf("%s: drop the unpublished silver build %s: %w", t, strings.Join(building, "."), err)
		default:
			fmt.Fprintf(out, "  %s: unpublished silver build %s dropped (built again from the new bronze table)\n", t, strings.Join(building, "."))
		}
	}
	fmt.Fprintf(out, "next: `tidemark run` with the same flags creates the bronze and silver tables of %d table(s) under their\n", len(tables))
	fmt.Fprintf(out, "  current schema and reads them in chunks while it streams; their changes from before %s are skipped\n", formatPos(before))
	fmt.Fprintf(out, "  (the re-snapshot holds them). Each silver table appears once its snapshot is complete.\n")
	return nil
}

// codeOf returns the fault code of err ("" if none).
func codeOf(err error) string {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	return ""
}

// requestID names a re-snapshot request: when, plus randomness so two
// requests in one second differ.
func requestID(now time.Time) string {
	var b [3]byte
	rand.Read(b[:])
	return now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}
