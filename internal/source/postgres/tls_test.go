package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/testenv"
)

// withSSL rewrites a testenv URL (sslmode=disable) to another sslmode and,
// if ca is set, sslrootcert.
func withSSL(u, mode, ca string) string {
	u = strings.Replace(u, "sslmode=disable", "sslmode="+mode, 1)
	if ca != "" {
		u += "&sslrootcert=" + url.QueryEscape(ca)
	}
	return u
}

func startTLS(t *testing.T, hosts ...string) *testenv.PG {
	t.Helper()
	pg, err := testenv.Start(testenv.Options{TLS: &testenv.TLS{Hosts: hosts}})
	if err != nil {
		if errors.Is(err, testenv.ErrNoPostgres) {
			testenv.Shared(t) // skips or fails as TIDEMARK_REQUIRE_PG says
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop() })
	return pg
}

// RELIABILITY row 30. A server whose certificate names 127.0.0.1 (the host
// tidemark connects to) and one whose certificate names another host, both
// signed by a test CA.
func TestTLS(t *testing.T) {
	right := startTLS(t)
	wrong := startTLS(t, "db.example.invalid")

	t.Run("verify-full captures end to end over TLS", func(t *testing.T) {
		h := newHarness(t, right, `CREATE TABLE t (id int primary key, v text);
			INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 200) g;`)
		r := h.as(withSSL(h.url, "verify-full", right.CAFile)).start(h.opts())
		h.exec(`UPDATE t SET v = 'streamed' WHERE id <= 10; INSERT INTO t VALUES (500, 'new')`)
		h.waitCaughtUp(r)
		// Every connection of the pipeline (the walsender included) is
		// encrypted.
		var conns, encrypted int
		h.query(func(c *pgx.Conn) error {
			return c.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE s.ssl)
				FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = 'tidemark'`).Scan(&conns, &encrypted)
		})
		if conns < 2 || encrypted != conns {
			t.Errorf("tidemark connections: %d, encrypted: %d; want every one (at least metadata and walsender) over TLS", conns, encrypted)
		}
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		h.checkBronze("t", `SELECT id::text, v FROM t`, "v")
	})

	t.Run("verify-full refuses a certificate for another host", func(t *testing.T) {
		h := newHarness(t, wrong, `CREATE TABLE t (id int primary key)`)
		err := h.as(withSSL(h.url, "verify-full", wrong.CAFile)).runErr(h.opts())
		t.Logf("verify-full, wrong host: %v", err)
		if !errors.Is(err, fault.ErrBadConfig) || fault.ExitCode(err) != fault.ExitConfig {
			t.Fatalf("err = %v (exit %d), want bad_config (exit 2): a certificate mismatch is no network blip to retry", err, fault.ExitCode(err))
		}
		if !strings.Contains(err.Error(), "does not match host 127.0.0.1") {
			t.Errorf("the error does not say the certificate does not match the host: %v", err)
		}
		if strings.Contains(err.Error(), wrong.Password) {
			t.Errorf("the error shows the password: %v", err)
		}
	})

	t.Run("verify-full refuses an unknown CA", func(t *testing.T) {
		h := newHarness(t, right, ``)
		_, err := connect(withSSL(h.url, "verify-full", wrong.CAFile))
		if !errors.Is(err, fault.ErrBadConfig) || !strings.Contains(err.Error(), "not signed by a CA in sslrootcert") {
			t.Fatalf("err = %v, want bad_config about the CA", err)
		}
	})

	// What each sslmode does against the server with the wrong host name:
	// the documented defaults (docs/operations.md, TLS).
	t.Run("sslmode behaviour", func(t *testing.T) {
		h := newHarness(t, wrong, ``)
		for _, tc := range []struct {
			mode, ca string
			ok, ssl  bool
		}{
			{"disable", "", true, false},
			{"prefer", "", true, true},            // TLS, nothing verified
			{"require", "", true, true},           // TLS, nothing verified
			{"require", wrong.CAFile, true, true}, // with sslrootcert: as verify-ca, host not checked
			{"verify-ca", wrong.CAFile, true, true},
			{"verify-full", wrong.CAFile, false, false},
		} {
			conn, err := connect(withSSL(h.url, tc.mode, tc.ca))
			name := tc.mode
			if tc.ca != "" {
				name += "+sslrootcert"
			}
			if (err == nil) != tc.ok {
				t.Errorf("%s: connect error %v, want connected=%v", name, err, tc.ok)
				continue
			}
			if err != nil {
				continue
			}
			var ssl bool
			if err := conn.QueryRow(context.Background(), `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl); err != nil {
				t.Fatal(err)
			}
			conn.Close(context.Background())
			if ssl != tc.ssl {
				t.Errorf("%s: ssl = %v, want %v", name, ssl, tc.ssl)
			}
		}
	})
}

// connect opens a connection the way tidemark does.
func connect(u string) (*pgx.Conn, error) {
	d, err := postgres.NewDialer(u, func(string) string { return "redacted" })
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return d.Connect(ctx)
}
