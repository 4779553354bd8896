package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/testenv"
)

// leastRole creates a role with LOGIN REPLICATION and nothing else, dropped
// when the test ends, and returns its name and a URL for h's database.
func leastRole(t *testing.T, h *harness) (string, string) {
	t.Helper()
	role := fmt.Sprintf("tm_least_%d", time.Now().UnixNano()%1e9)
	const password = "least-privilege-pw"
	h.exec(fmt.Sprintf(`CREATE ROLE %s LOGIN REPLICATION PASSWORD '%s'`, role, password))
	t.Cleanup(func() {
		// Before the database is dropped (cleanups run last-in first-out).
		c, err := pgx.Connect(context.Background(), h.url)
		if err == nil {
			c.Exec(context.Background(), "DROP OWNED BY "+role)
			c.Close(context.Background())
		}
		c, err = pgx.Connect(context.Background(), h.pg.URL("postgres"))
		if err == nil {
			if _, err := c.Exec(context.Background(), "DROP ROLE "+role); err != nil {
				t.Logf("drop role %s: %v", role, err)
			}
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(h.url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	return role, u.String()
}

// as returns a copy of h whose captures connect with url (h keeps the
// superuser for the test's own SQL).
func (h *harness) as(url string) *harness {
	c := *h
	c.url = url
	return &c
}

// RELIABILITY row 31: a role with LOGIN REPLICATION and SELECT on the
// published tables (the publication created beforehand by a superuser or
// the tables' owner) runs the whole pipeline: slot, snapshot, streaming,
// heartbeats and watermarks (pg_logical_emit_message is executable by
// PUBLIC), the pipeline lock (advisory locks need no grant). Revoking
// SELECT while it runs stops it with permission_denied naming the table;
// nothing is acknowledged past the lake, and after the grant is restored a
// restart loses nothing.
func TestLeastPrivilegeRole(t *testing.T) {
	pg := testenv.Shared(t)
	h := newHarness(t, pg, `CREATE TABLE orders (id int primary key, v text);
		CREATE TABLE customers (id int primary key, name text);
		INSERT INTO orders SELECT g, 'o' || g FROM generate_series(1, 300) g;
		INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 300) g;`)
	role, roleURL := leastRole(t, h)
	hr := h.as(roleURL)

	// Without a publication, tidemark would create one FOR ALL TABLES,
	// which needs a superuser: a named error that says what to grant.
	err := hr.runErr(h.opts())
	if !errors.Is(err, fault.ErrPermissionDenied) || fault.ExitCode(err) != fault.ExitFatal {
		t.Fatalf("no publication, no grants: err = %v, want permission_denied (exit 3)", err)
	}
	t.Logf("no publication: %v", err)
	if !strings.Contains(err.Error(), "may not create publication") || !strings.Contains(err.Error(), "superuser") {
		t.Errorf("permission_denied does not say what was refused: %v", err)
	}

	// SELECT without a publication of its own is not enough either; with
	// the publication created beforehand, nothing more is needed.
	h.exec(`CREATE PUBLICATION tidemark_test FOR TABLE orders, customers`)
	err = hr.runErr(h.opts())
	if !errors.Is(err, fault.ErrPermissionDenied) || !strings.Contains(err.Error(), "public.customers") || !strings.Contains(err.Error(), "GRANT SELECT") {
		t.Fatalf("no SELECT: err = %v, want permission_denied naming public.customers and the GRANT", err)
	}
	h.exec(fmt.Sprintf(`GRANT SELECT ON orders, customers TO %s`, role))

	r := hr.start(h.opts())
	h.exec(`UPDATE orders SET v = 'updated' WHERE id <= 20; DELETE FROM customers WHERE id > 290;
		INSERT INTO orders VALUES (1001, 'streamed')`)
	h.waitCaughtUp(r)
	h.checkBronze("orders", `SELECT id::text, v FROM orders`, "v")
	h.checkBronze("customers", `SELECT id::text, name FROM customers`, "name")

	// Revoke SELECT on one table while it runs, with changes on both.
	h.exec(`INSERT INTO customers VALUES (2001, 'before the revoke'); UPDATE orders SET v = 'before the revoke' WHERE id = 1`)
	h.exec(fmt.Sprintf(`REVOKE SELECT ON customers FROM %s`, role))
	h.exec(`INSERT INTO customers VALUES (2002, 'after the revoke'); UPDATE orders SET v = 'after the revoke' WHERE id = 2`)
	select {
	case err = <-r.done:
		r.done <- err
	case <-time.After(60 * time.Second):
		t.Fatal("capture kept running after SELECT on a published table was revoked")
	}
	if !errors.Is(err, fault.ErrPermissionDenied) || fault.ExitCode(err) != fault.ExitFatal || !strings.Contains(err.Error(), "public.customers") {
		t.Fatalf("after REVOKE: err = %v (exit %d), want permission_denied (exit 3) naming public.customers", err, fault.ExitCode(err))
	}
	t.Logf("after REVOKE: %v", err)
	if strings.Contains(err.Error(), "least-privilege-pw") {
		t.Errorf("the error shows the password: %v", err)
	}
	h.checkAckNotAheadOfLake()

	// A restart without the grant refuses at once, with the same name.
	if err := hr.runErr(h.opts()); !errors.Is(err, fault.ErrPermissionDenied) || !strings.Contains(err.Error(), "public.customers") {
		t.Fatalf("restart without the grant: err = %v, want permission_denied naming public.customers", err)
	}

	// Grant it back: the restart captures everything, nothing lost.
	h.exec(fmt.Sprintf(`GRANT SELECT ON customers TO %s`, role))
	r = hr.start(h.opts())
	h.exec(`INSERT INTO customers VALUES (2003, 'after the grant')`)
	h.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	h.checkBronze("orders", `SELECT id::text, v FROM orders`, "v")
	h.checkBronze("customers", `SELECT id::text, name FROM customers`, "name")
}

// The other way to run without a pre-created publication: the role owns
// the tables and may CREATE in the database, and tidemark creates a
// table-list publication itself (--tables).
func TestLeastPrivilegeOwnerCreatesPublication(t *testing.T) {
	pg := testenv.Shared(t)
	h := newHarness(t, pg, `CREATE TABLE items (id int primary key, v text);
		INSERT INTO items SELECT g, 'i' || g FROM generate_series(1, 100) g;`)
	role, roleURL := leastRole(t, h)
	var db string
	h.query(func(c *pgx.Conn) error {
		return c.QueryRow(context.Background(), `SELECT current_database()`).Scan(&db)
	})
	h.exec(fmt.Sprintf(`ALTER TABLE items OWNER TO %s; GRANT CREATE ON DATABASE %s TO %s`, role, pgx.Identifier{db}.Sanitize(), role))
	opts := h.opts()
	opts.Tables = []change.TableID{{Schema: "public", Name: "items"}}
	r := h.as(roleURL).start(opts)
	h.exec(`UPDATE items SET v = 'streamed' WHERE id <= 10`)
	h.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	h.checkBronze("items", `SELECT id::text, v FROM items`, "v")
}

// checkBronze compares the replay of a bronze table with the source.
func (h *harness) checkBronze(table, sql, col string) {
	h.t.Helper()
	got := replay(h.t, h.rows(bronzeIdent(table)...), "id")
	want := h.sourceRows(sql)
	for k, w := range want {
		if r, ok := got[k]; !ok || fmt.Sprint(r[col]) != w {
			h.t.Errorf("%s key %s: source %q, bronze replay %v", table, k, w, r[col])
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			h.t.Errorf("%s key %s: in bronze replay, not in the source", table, k)
		}
	}
}

// checkAckNotAheadOfLake checks that the slot's confirmed position is not
// past the checkpoint recorded in the lake.
func (h *harness) checkAckNotAheadOfLake() {
	h.t.Helper()
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: h.wh})
	if err != nil {
		h.t.Fatal(err)
	}
	defer cat.Close()
	cp, ok, err := bronze.LoadCheckpoint(ctx, cat, h.source)
	if err != nil || !ok {
		h.t.Fatalf("lake checkpoint: %v (found %v)", err, ok)
	}
	_, confirmed := h.slotLSNs()
	if confirmed > postgres.AckedLSN(cp) {
		h.t.Errorf("slot confirmed to %X, past the lake's checkpoint %X", confirmed, postgres.AckedLSN(cp))
	}
}

// sourceRows runs sql (two text columns: key, value) on the source.
func (h *harness) sourceRows(sql string) map[string]string {
	h.t.Helper()
	out := map[string]string{}
	h.query(func(c *pgx.Conn) error {
		rs, err := c.Query(context.Background(), sql)
		if err != nil {
			return err
		}
		for rs.Next() {
			var k, v string
			if err := rs.Scan(&k, &v); err != nil {
				return err
			}
			out[k] = v
		}
		return rs.Err()
	})
	return out
}
