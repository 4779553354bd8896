//go:build faults

package faults_test

// Capture-side rows of RELIABILITY.md that need the real binary: the exit
// code and the [code] a supervisor sees (row 8), and a kill -9 at an exact
// point of a streamed transaction (row 14).

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
)

// Row 8: the slot is dropped while tidemark runs. The run loop treats the
// terminated walsender as transient and retries; the retry must find the
// slot gone and exit 3 with [slot_lost], never create a new slot.
func TestQuickSlotDroppedWhileRunning(t *testing.T) {
	injections, lost, note := 0, -1, ""
	record(t, "8 slot dropped while running", &injections, &lost, &note)
	e := newEnv(t, "slotdrop", envOptions{preload: 500})
	s := e.start()
	e.waitCaughtUp(s, e.walLSN(), 2*time.Minute)

	c := e.conn()
	defer c.Close(context.Background())
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, _, ok := e.slotState(); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("could not drop the slot within a minute")
		}
		if _, err := c.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slot); err != nil {
			t.Fatal(err)
		}
		_, _ = c.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, e.slot)
		time.Sleep(20 * time.Millisecond)
	}
	injections++
	if _, err := c.Exec(ctx, `INSERT INTO `+workTable+` VALUES (100000, 1, 'written while there was no slot')`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("tidemark kept running (retrying?) after its slot was dropped")
	}
	code := s.cmd.ProcessState.ExitCode()
	out := sessionOutput(t, s)
	if code != fault.ExitFatal || !strings.Contains(out, "[slot_lost]") {
		t.Fatalf("exit %d, want %d with [slot_lost]; output tail:\n%s", code, fault.ExitFatal, tail(out, 15))
	}
	if _, _, ok := e.slotState(); ok {
		t.Fatal("the slot was recreated")
	}
	// A restart refuses the same way.
	s = e.start()
	<-s.done
	if code := s.cmd.ProcessState.ExitCode(); code != fault.ExitFatal || !strings.Contains(sessionOutput(t, s), "[slot_lost]") {
		t.Fatalf("restart: exit %d, want %d with [slot_lost]", code, fault.ExitFatal)
	}
	lost = 0 // nothing was captured silently past the gap: the gap is refused
	note = "exit 3 [slot_lost] twice; slot not recreated"
}

// Row 14: kill -9 while a large transaction is being streamed to tidemark
// (spooled, not committed). Nothing of it may be visible; after the commit
// and a restart it is applied exactly once.
func TestQuickStreamedTransactionCrash(t *testing.T) {
	injections, lost, note := 0, -1, ""
	record(t, "14 crash inside a streamed transaction", &injections, &lost, &note)
	e := newEnv(t, "streamcrash", envOptions{preload: 100, settings: map[string]string{"logical_decoding_work_mem": "64kB"}})
	s := e.start()
	e.waitCaughtUp(s, e.walLSN(), 2*time.Minute)

	ctx := context.Background()
	tx, err := pgx.Connect(ctx, e.srcURL)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close(ctx)
	const lo, hi = 10001, 13000
	if _, err := tx.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s SELECT g, 1, repeat('s', 300) FROM generate_series(%d, %d) g`, workTable, lo, lo+1999)); err != nil {
		t.Fatal(err)
	}
	// Streamed: tidemark has opened the transaction's spool file.
	spool := filepath.Join(e.wh, "_tidemark", "spool")
	deadline := time.Now().Add(time.Minute)
	for {
		files, _ := filepath.Glob(filepath.Join(spool, "xid-*.spool"))
		if len(files) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no spool file in %s within a minute: the transaction was not streamed", spool)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.kill()
	injections++
	e.checkAck("kill inside a streamed transaction", true)
	if n := e.bronzeRowsIn(lo, hi); n != 0 {
		t.Errorf("%d rows of the uncommitted transaction are in bronze after the kill", n)
	}
	// The rest of the transaction, then its commit, while tidemark is down.
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s SELECT g, 1, 'tail' FROM generate_series(%d, %d) g`, workTable, lo+2000, hi)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	s = e.start()
	e.waitCaughtUp(s, e.walLSN(), 2*time.Minute)
	if code := s.term(time.Minute); code != 0 {
		t.Errorf("clean stop exited %d", code)
	}
	if n := e.bronzeRowsIn(lo, hi); n != hi-lo+1 {
		t.Errorf("bronze holds %d rows of the %d-row transaction, want each exactly once", n, hi-lo+1)
	}
	lost = e.oracle()
	note = fmt.Sprintf("%d-row transaction killed mid-stream, applied once", hi-lo+1)
}

// Row 31: the binary runs as a role with LOGIN REPLICATION and SELECT on
// the table (publication created beforehand by the superuser) under a
// workload; revoking SELECT stops it with exit 3 [permission_denied] naming
// the table; after the grant it resumes and the oracle (whose final session
// runs as the same role) holds.
func TestQuickLeastPrivilege(t *testing.T) {
	injections, lost, note := 0, -1, ""
	record(t, "31 least privilege, SELECT revoked mid-run", &injections, &lost, &note)
	e := newEnv(t, "leastpriv", envOptions{preload: 3000})
	role := "tm_" + e.source
	const password = "least-privilege-canary"
	e.pg.Exec(t, e.srcURL, fmt.Sprintf(`CREATE ROLE %s LOGIN REPLICATION PASSWORD '%s';
		GRANT SELECT ON %s TO %s;
		CREATE PUBLICATION %s FOR TABLE %s;`, role, password, workTable, role, pgx.Identifier{e.slot}.Sanitize(), workTable))
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), e.srcURL)
		if err == nil {
			c.Exec(context.Background(), "DROP OWNED BY "+role)
			c.Close(context.Background())
		}
		if c, err = pgx.Connect(context.Background(), e.pg.URL("postgres")); err == nil {
			c.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(e.srcURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	e.runURL = u.String()

	s := e.start()
	wl := e.startWorkload(seed(t), 3000)
	e.waitCaughtUp(s, e.walLSN(), 2*time.Minute)
	e.pg.Exec(t, e.srcURL, fmt.Sprintf(`REVOKE SELECT ON %s FROM %s`, workTable, role))
	injections++
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("tidemark kept running after SELECT was revoked")
	}
	out := sessionOutput(t, s)
	if code := s.cmd.ProcessState.ExitCode(); code != fault.ExitFatal || !strings.Contains(out, "[permission_denied]") || !strings.Contains(out, "public."+workTable) {
		t.Fatalf("after REVOKE: exit %d, want %d with [permission_denied] naming public.%s; output tail:\n%s", code, fault.ExitFatal, workTable, tail(out, 15))
	}
	if strings.Contains(out, password) {
		t.Error("the password appears in tidemark's output")
	}
	e.checkAck("after the permission error", true)
	e.pg.Exec(t, e.srcURL, fmt.Sprintf(`GRANT SELECT ON %s TO %s`, workTable, role))
	wl.stop(t)
	lost = e.oracle()
	note = "started as LOGIN REPLICATION + SELECT; exit 3 [permission_denied] on REVOKE; resumed after GRANT"
}

// bronzeRowsIn counts the bronze rows of the work table with pk in [lo, hi].
func (e *env) bronzeRowsIn(lo, hi int) int {
	e.t.Helper()
	if _, ok := e.checkpoint(); !ok {
		return 0
	}
	n := 0
	for _, r := range bronzetest.Read(e.t, e.wh, bronze.Ident(e.source, change.TableID{Schema: "public", Name: workTable})...) {
		if pk, ok := r["pk"].(int64); ok && pk >= int64(lo) && pk <= int64(hi) {
			n++
		}
	}
	return n
}

// sessionOutput returns what session s wrote to the env's log.
func sessionOutput(t *testing.T, s *session) string {
	t.Helper()
	b, err := os.ReadFile(s.log)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) < s.offset {
		return ""
	}
	out := string(b[s.offset:])
	if i := strings.Index(out[1:], "===== tidemark session"); i >= 0 {
		out = out[:i+1]
	}
	return out
}
