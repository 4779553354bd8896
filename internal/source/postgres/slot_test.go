package postgres_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/testenv"
)

// RELIABILITY row 8: the slot is dropped while tidemark runs (its walsender
// terminated first, as PostgreSQL requires). The session ends; the retry
// that follows a transient error must stop with slot_lost, never create a
// new slot and carry on from "now" (which would skip every change made
// while there was no slot).
func TestSlotDroppedWhileRunning(t *testing.T) {
	pg := testenv.Shared(t)
	h := newHarness(t, pg, `CREATE TABLE k (id int primary key, v text);
		INSERT INTO k SELECT g, 'v' FROM generate_series(1, 50) g;`)
	r := h.start(h.opts())
	h.waitCaughtUp(r)

	h.terminateAndDropSlot("tidemark_test")
	h.exec(`INSERT INTO k VALUES (1000, 'written while there was no slot')`)

	var first error
	select {
	case first = <-r.done:
		r.done <- first
	case <-time.After(60 * time.Second):
		t.Fatal("the session kept running after its walsender was terminated and its slot dropped")
	}
	// The session ends either on the terminated walsender (transient, so
	// the pipeline retries) or already on the missing slot.
	if first == nil || (fault.ClassOf(first) != fault.Transient && !errors.Is(first, fault.ErrSlotLost)) {
		t.Fatalf("session error = %v (class %s), want a transient error or slot_lost", first, fault.ClassOf(first))
	}

	// The retry (what tidemark run does after a transient error).
	err := h.runErr(h.opts())
	if !errors.Is(err, fault.ErrSlotLost) || fault.ExitCode(err) != fault.ExitFatal {
		t.Fatalf("retry: err = %v (exit %d), want slot_lost (exit %d)", err, fault.ExitCode(err), fault.ExitFatal)
	}
	for _, want := range []string{`"tidemark_test"`, "re-snapshot"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("slot_lost message lacks %q (the slot and the recovery): %v", want, err)
		}
	}
	if n := h.slotCount("tidemark_test"); n != 0 {
		t.Errorf("the slot was recreated behind the operator's back (%d slots named tidemark_test)", n)
	}
	// A second retry says the same: the refusal is stable, not a one-off.
	if err := h.runErr(h.opts()); !errors.Is(err, fault.ErrSlotLost) {
		t.Fatalf("second retry: err = %v, want slot_lost", err)
	}
}

// terminateAndDropSlot terminates the walsender using the slot and drops
// it, repeating until the slot is gone (a reconnecting reader may take the
// slot again in between).
func (h *harness) terminateAndDropSlot(name string) {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for h.slotCount(name) > 0 {
		if time.Now().After(deadline) {
			h.t.Fatalf("slot %s could not be dropped within 60s", name)
		}
		h.query(func(c *pgx.Conn) error {
			ctx := context.Background()
			if _, err := c.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, name); err != nil {
				return err
			}
			// Fails with "is active" while the walsender is still exiting.
			_, _ = c.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, name)
			return nil
		})
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *harness) slotCount(name string) int {
	h.t.Helper()
	var n int
	h.query(func(c *pgx.Conn) error {
		return c.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&n)
	})
	return n
}
