package app

import (
	"context"
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
	"github.com/tidemark/tidemark/internal/source/mysql"
)

// binlogCodes are the errors of a checkpoint a MySQL pipeline can no
// longer resume from; a re-snapshot of every table from the server's
// position now repairs them.
var binlogCodes = []*fault.Error{fault.ErrBinlogPurged, fault.ErrWALLost, fault.ErrServerChanged, fault.ErrCorruptState}

// resnapshotMySQL is Resnapshot for a MySQL/MariaDB source: the same
// requests (named tables, --all, --replace), with no slot. The binlog
// position a --replace marks is the server's binlog end now (SHOW MASTER
// STATUS): the stream's changes of a replaced table at or below it are
// not written (their effect is in the table's re-snapshot, read after it).
// When the checkpoint cannot resume (binlog_purged, server_changed, an
// unreadable resume token), --all is required, and the checkpoint is
// reset to the server's binlog position now once every table is marked.
// MySQL holds no lock for a running pipeline: stop it first.
func resnapshotMySQL(ctx context.Context, cfg *config.Config, opts ResnapshotOptions, cat lake.Catalog, captured []change.TableID, out io.Writer, log *slog.Logger) error {
	mo, err := mysqlOptions(cfg)
	if err != nil {
		return err
	}
	if opts.ResetSlot {
		return fault.With(fault.ErrBadConfig, "--reset-slot: a MySQL/MariaDB source has no replication slot; use --all alone", nil)
	}
	// Why the pipeline cannot resume from its checkpoint, if it cannot:
	// then every table is read again and the checkpoint reset (--all).
	var problem error
	cp, haveCP, cpErr := bronze.LoadCheckpoint(ctx, cat, cfg.Name)
	switch {
	case errors.Is(cpErr, fault.ErrCorruptState):
		problem = cpErr
	case cpErr != nil:
		return cpErr
	default:
		if perr := mysql.ResumeProblem(ctx, mo, cp, haveCP); perr != nil {
			if !slices.ContainsFunc(binlogCodes, func(c *fault.Error) bool { return errors.Is(perr, c) }) {
				return perr
			}
			problem = perr
		}
	}
	if problem != nil && opts.Replace {
		return fault.With(fault.ErrBadConfig, fmt.Sprintf(
			"the pipeline cannot resume from its checkpoint, so every table must be read again: run `tidemark resnapshot --all` first, then --replace (the problem: [%s] %v)",
			codeOf(problem), problem), nil)
	}
	if problem != nil && !opts.All {
		return fault.With(fault.ErrBadConfig, fmt.Sprintf(
			"the pipeline cannot resume from its checkpoint, so every table must be read again: rerun as `tidemark resnapshot --all` with the same flags (the problem: [%s] %v)",
			codeOf(problem), problem), nil)
	}
	var tables []change.TableID
	if opts.All {
		tables = captured
	} else {
		for _, s := range opts.Tables {
			// "shop.orders" or "orders": the schema of a MySQL table is its database.
			n, err := config.ParseTableName(s)
			if err != nil {
				n = config.TableName{Schema: mo.Database, Table: s}
			}
			t := change.TableID{Schema: n.Schema, Name: n.Table}
			switch {
			case t.Schema != mo.Database:
				return fault.With(fault.ErrBadConfig, fmt.Sprintf("table %s is not in database %s, the one the source URL names", s, mo.Database), nil)
			case !slices.Contains(captured, t) && !opts.Replace:
				return fault.With(fault.ErrBadConfig, fmt.Sprintf("pipeline %q has no bronze table for %s: is it captured (see `tidemark status`)?", cfg.Name, t), nil)
			}
			if !slices.Contains(tables, t) {
				tables = append(tables, t)
			}
		}
	}
	id := requestID(time.Now())
	fmt.Fprintf(out, "re-snapshot %s of pipeline %q:\n", id, cfg.Name)
	if problem != nil {
		fmt.Fprintf(out, "  the checkpoint cannot resume: [%s] %v\n", codeOf(problem), config.RedactError(problem, cfg.Secrets()...))
	}
	if opts.Replace {
		before, err := mysqlLogEnd(ctx, cfg.Source.Reveal())
		if err != nil {
			return err
		}
		return replaceTables(ctx, cat, cfg.Name, tables, id, before, mysqlFormatPos, out)
	}
	for _, t := range tables {
		snap, err := bronze.RequestSnapshot(ctx, cat, cfg.Name, t, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %s: snapshot state reset to pending (%s, snapshot %d)\n", t, strings.Join(bronze.Ident(cfg.Name, t), "."), snap)
	}
	// Every table is marked before the checkpoint is reset: a crash in
	// between leaves a pipeline that still refuses to start, never one
	// that streams from the new position with a table that skipped the gap.
	if problem != nil {
		// The watermark stays where the old stream left it (the source
		// is not captured further until the re-snapshot).
		wm := cp.Watermark
		if wm.IsZero() {
			wm = time.Now().UTC()
		}
		ncp, at, err := mysql.StartCheckpoint(ctx, mo, wm)
		if err != nil {
			return err
		}
		w, err := bronze.NewWriter(ctx, cat, cfg.Name, cfg.Slot, log)
		if err != nil {
			return err
		}
		err = w.Flush(ctx, ncp)
		w.Close()
		if err != nil {
			return fmt.Errorf("the checkpoint could not be reset to the server's binlog position %s (rerun `tidemark resnapshot --all`): %w", at, err)
		}
		fmt.Fprintf(out, "  checkpoint reset to the server's binlog position now, %s (was %s)\n", at, mysqlFormatPos(cp.Pos))
	}
	fmt.Fprintf(out, "next: `tidemark run` with the same flags reads %d table(s) again in chunks while it streams\n", len(tables))
	fmt.Fprintf(out, "  (progress: `snapshot progress` log lines and `tidemark status`). Until a table's re-snapshot is\n")
	fmt.Fprintf(out, "  complete its silver table keeps its state from before this request; then one merge replaces it.\n")
	return nil
}
