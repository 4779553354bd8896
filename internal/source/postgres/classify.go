package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/internal/fault"
)

// Classifier is the PostgreSQL source's error classifier: which pgconn
// errors (SQLSTATEs, connection failures) a reconnect can fix, and what to
// check when one persists. internal/app registers it with
// fault.RegisterClassifier; this package applies it itself (classify).
func Classifier() fault.Classifier {
	return fault.Classifier{Name: "postgres", Class: classOfPg, Check: checkPg}
}

// classOfPg classifies the errors of pgconn: server errors by SQLSTATE
// (ok for every *pgconn.PgError: a code not listed is not transient), and
// connection errors pgconn knows to be safe to retry.
func classOfPg(err error) (fault.Class, bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03": // admin/crash shutdown, cannot connect now
			return fault.Transient, true
		case len(pgErr.Code) == 2+3 && pgErr.Code[:2] == "08": // connection exception
			return fault.Transient, true
		case pgErr.Code == "55006": // object in use (slot active for another PID: our previous walsender not yet gone)
			return fault.Transient, true
		case pgErr.Code == "53300": // too many connections
			return fault.Transient, true
		case pgErr.Code == "40001", pgErr.Code == "40P01": // serialization failure, deadlock
			return fault.Transient, true
		}
		return fault.Unknown, true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) || pgconn.SafeToRetry(err) {
		return fault.Transient, true
	}
	return fault.Unknown, false
}

// checkPg says what to check about a PostgreSQL error that persisted.
func checkPg(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	switch pgErr.Code {
	case "53300":
		return "the server has no free connection slots: raise max_connections (or reserved connections for replication) or close idle sessions"
	case "57P03":
		return "the server is not accepting connections yet (starting up, shutting down or in recovery): check its log"
	case "55006":
		return "the replication slot is in use by another process: check pg_replication_slots.active_pid for a second tidemark or tool on the same slot"
	}
	return ""
}

// isTransient is fault.IsTransient with this source's rules first, whether
// or not they are registered.
func isTransient(err error) bool {
	if c, ok := classOfPg(err); ok {
		return c == fault.Transient
	}
	return fault.IsTransient(err)
}

// classOf is fault.ClassOf with this source's rules, whether or not they
// are registered.
func classOf(err error) fault.Class {
	var fe *fault.Error
	if err != nil && !errors.As(err, &fe) && isTransient(err) {
		return fault.Transient
	}
	return fault.ClassOf(err)
}
