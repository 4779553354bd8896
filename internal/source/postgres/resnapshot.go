package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// This file holds the source side of `tidemark resnapshot`: the request a
// bronze table records, and the slot repair for a pipeline whose slot or
// WAL was lost. A re-snapshot is only ever an operator's explicit command;
// run never starts one on its own.

// snapshotWanted reports whether t's rows are to be read: snapshots are on,
// or an operator asked for this one.
func (c *Capture) snapshotWanted(t *table) bool {
	return c.opts.Snapshot.Enabled || t.snapshot.Request != ""
}

// Admin is a maintenance session on the source for a stopped pipeline. It
// holds the pipeline's one-writer lock (the one `tidemark run` takes) from
// OpenAdmin until Close, so no run starts in between.
type Admin struct {
	c    *Capture
	meta *pgx.Conn
}

// OpenAdmin connects and takes the pipeline's lock. A running pipeline
// makes it fail with fault.ErrAlreadyRunning (after waiting up to 15 s for
// a just-stopped one to let go).
func OpenAdmin(ctx context.Context, d *Dialer, opts Options, log *slog.Logger) (*Admin, error) {
	c := &Capture{d: d, opts: opts, log: log}
	meta, err := d.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.lockPipeline(ctx, meta); err != nil {
		meta.Close(context.Background())
		return nil, err
	}
	return &Admin{c: c, meta: meta}, nil
}

// Close releases the lock.
func (a *Admin) Close() { a.meta.Close(context.Background()) }

// SlotState is what Check found.
type SlotState struct {
	Exists             bool
	ConfirmedFlush     uint64
	PublicationMissing bool
}

// Check runs run's start-up checks of the slot and publication against the
// checkpoint: it returns the named error a run would stop with
// (slot_lost, wal_lost, slot_moved, publication_missing, bad_config), or
// nil when the pipeline can resume where it stopped.
func (a *Admin) Check(ctx context.Context, cp pipeline.Checkpoint, haveCP bool) (SlotState, error) {
	si, err := slotInfo(ctx, a.meta, a.c.opts.Slot)
	if err != nil {
		return SlotState{}, err
	}
	st := SlotState{Exists: si.Exists, ConfirmedFlush: si.ConfirmedFlush}
	ok, err := publicationExists(ctx, a.meta, a.c.opts.Publication)
	if err != nil {
		return st, err
	}
	st.PublicationMissing = !ok
	if err := a.c.slotProblem(si, cp, haveCP); err != nil {
		return st, err
	}
	if !ok && haveCP {
		return st, fault.With(fault.ErrPublicationMissing, fmt.Sprintf(
			"publication %q was dropped after tidemark started using it: changes made while it was missing cannot be decoded", a.c.opts.Publication), nil)
	}
	return st, nil
}

// PublishedTables lists the tables of the pipeline's publication (none if
// it does not exist).
func (a *Admin) PublishedTables(ctx context.Context) ([]change.TableID, error) {
	return publicationTables(ctx, a.meta, a.c.opts.Publication)
}

// EnsurePublication creates the pipeline's publication if it is missing,
// as run does on a first start (created reports it).
func (a *Admin) EnsurePublication(ctx context.Context) (created bool, err error) {
	ok, err := publicationExists(ctx, a.meta, a.c.opts.Publication)
	if err != nil || ok {
		return false, err
	}
	a.c.log.Info("creating publication", "publication", a.c.opts.Publication, "tables", len(a.c.opts.Tables))
	return true, createPublication(ctx, a.meta, a.c.opts.Publication, a.c.opts.Tables)
}

// ReplaceSlot drops the pipeline's slot if it exists (waiting for a
// lingering walsender of the stopped pipeline to go) and creates a new
// one. It returns the new slot's consistent point: the new stream starts
// there. Only for a slot the pipeline can no longer use, after every table
// was marked for re-snapshot: the changes between the old position and the
// new one are never streamed. dropped is the old slot's confirmed position
// (0: there was none).
func (a *Admin) ReplaceSlot(ctx context.Context) (lsn, dropped uint64, err error) {
	slot := a.c.opts.Slot
	deadline := time.Now().Add(30 * time.Second)
	for {
		si, err := slotInfo(ctx, a.meta, slot)
		if err != nil {
			return 0, 0, err
		}
		if !si.Exists {
			break
		}
		if si.Plugin != "pgoutput" || (si.Database != "" && si.Database != a.c.d.Database()) {
			return 0, 0, fault.With(fault.ErrBadConfig, fmt.Sprintf("replication slot %q is not a tidemark slot of database %q (plugin %q, database %q): refusing to drop it; choose another --slot",
				slot, a.c.d.Database(), si.Plugin, si.Database), nil)
		}
		if si.ActivePID == 0 {
			_, err = a.meta.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot)
			if err == nil {
				a.c.log.Info("dropped replication slot", "slot", slot, "confirmed_flush_lsn", FormatLSN(si.ConfirmedFlush))
				dropped = max(si.ConfirmedFlush, 1)
				break
			}
			if !isTransient(err) {
				return 0, 0, classify(fmt.Errorf("drop replication slot %q: %w", slot, err))
			}
		}
		if time.Now().After(deadline) {
			return 0, 0, fault.MarkTransient(fmt.Errorf("replication slot %q stays in use by backend pid %d: stop whatever reads it, then rerun", slot, si.ActivePID))
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	repl, err := a.c.d.ConnectReplication(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer repl.Close(context.Background())
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if err != nil {
		return 0, 0, classify(fmt.Errorf("create replication slot %q: %w", slot, err))
	}
	lsn, err = ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, 0, errors.Join(fmt.Errorf("created replication slot %q but cannot read its consistent point", slot), err)
	}
	a.c.log.Info("created replication slot", "slot", slot, "consistent_point", res.ConsistentPoint)
	return lsn, dropped, nil
}
