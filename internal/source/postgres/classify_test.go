package postgres_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/source/postgres"
)

// The PostgreSQL classifier, registered as the composition root does:
// SQLSTATEs a reconnect can fix are transient, other server errors are
// not (even with an EOF in the chain), and a persisting one gets
// PostgreSQL's advice.
func TestClassifierSQLSTATEs(t *testing.T) {
	fault.RegisterClassifier(postgres.Classifier())
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57P01"}, true},
		{fmt.Errorf("query: %w", &pgconn.PgError{Code: "08006"}), true},
		{&pgconn.PgError{Code: "55006"}, true},
		{&pgconn.PgError{Code: "53300"}, true},
		{&pgconn.PgError{Code: "40P01"}, true},
		{&pgconn.PgError{Code: "42601"}, false},
		{errors.Join(&pgconn.PgError{Code: "42P01"}, io.EOF), false},
		{&pgconn.ConnectError{}, true},
	} {
		if got := fault.IsTransient(tc.err); got != tc.want {
			t.Errorf("IsTransient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if got := fault.Check(&pgconn.PgError{Code: "53300"}); !strings.Contains(got, "no free connection slots") {
		t.Errorf("Check(53300) = %q", got)
	}
}
