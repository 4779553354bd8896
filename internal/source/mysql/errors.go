package mysql

import (
	"database/sql/driver"
	"errors"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	sqldriver "github.com/go-sql-driver/mysql"

	"github.com/tidemark/tidemark/internal/fault"
)

// Server error numbers tidemark tells apart (MySQL and MariaDB share them).
const (
	erDBAccessDenied       = 1044 // access denied for user to database
	erAccessDenied         = 1045 // wrong user or password
	erBadDB                = 1049 // unknown database
	erServerShutdown       = 1053
	erTooManyConnections   = 1040
	erNetReadInterrupted   = 1159
	erNetWriteInterrupted  = 1161
	erTableAccessDenied    = 1142
	erColumnAccessDenied   = 1143
	erLockWaitTimeout      = 1205
	erLockDeadlock         = 1213
	erSpecificAccessDenied = 1227 // "you need (at least one of) the X privilege(s)"
	erQueryInterrupted     = 1317
	erMasterFatalReading   = 1236 // the server cannot send its binlog from the requested position
	erConnectionKilled     = 1927 // MariaDB
	erUnknownSystemVar     = 1193
	erNoSuchTable          = 1146
)

// ServerError returns the server's error number and message in err's chain,
// from either client library (go-sql-driver for queries, go-mysql for the
// binlog stream), and false when err is not a server error.
func ServerError(err error) (number uint16, message string, ok bool) {
	var se *sqldriver.MySQLError
	if errors.As(err, &se) {
		return se.Number, se.Message, true
	}
	var me *gomysql.MyError
	if errors.As(err, &me) {
		return me.Code, me.Message, true
	}
	return 0, "", false
}

// Classify marks err with tidemark's class and code when it is a MySQL or
// MariaDB condition tidemark knows, and returns other errors unchanged (an
// error that already carries a class keeps it). The messages say what to do.
//
// The binlog server reports every refusal to stream from a position with the
// one number 1236; its message is the only thing that tells a purged binlog,
// a server_id taken by another replica and a position the server never had
// apart, so for 1236 alone the text is read.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	num, msg, ok := ServerError(err)
	if !ok {
		if errors.Is(err, driver.ErrBadConn) || errors.Is(err, sqldriver.ErrInvalidConn) || fault.IsTransient(err) {
			return fault.MarkTransient(err)
		}
		return err
	}
	switch num {
	case erAccessDenied:
		return fault.With(fault.ErrBadConfig, "the source rejected the credentials: check the user and password in --source", err)
	case erBadDB:
		return fault.With(fault.ErrBadConfig, "the source database does not exist: check the database name in --source", err)
	case erDBAccessDenied:
		return fault.With(fault.ErrPermissionDenied, "the source user may not use the database: grant it what binlog capture needs (GRANT SELECT ON <db>.* or ON *.*, and REPLICATION SLAVE, REPLICATION CLIENT / BINLOG MONITOR ON *.*: docs/operations.md, MySQL and MariaDB prerequisites)", err)
	case erTableAccessDenied, erColumnAccessDenied, erSpecificAccessDenied:
		return fault.With(fault.ErrPermissionDenied, "permission denied on the source: grant the tidemark user REPLICATION SLAVE, REPLICATION CLIENT (MariaDB: BINLOG MONITOR) and SELECT (docs/operations.md, MySQL and MariaDB prerequisites)", err)
	case erServerShutdown, erTooManyConnections, erNetReadInterrupted, erNetWriteInterrupted,
		erLockWaitTimeout, erLockDeadlock, erQueryInterrupted, erConnectionKilled:
		return fault.MarkTransient(err)
	case erMasterFatalReading:
		return classifyBinlogRefusal(msg, err)
	}
	return err
}

func classifyBinlogRefusal(msg string, err error) error {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "same server_uuid") || strings.Contains(m, "same server_id") ||
		strings.Contains(m, "same server-uuid"):
		return fault.With(fault.ErrServerIDConflict,
			"another replica reads the source's binlog with tidemark's server_id: give this pipeline a server_id no other replica of the source uses", err)
	case strings.Contains(m, "purged") || strings.Contains(m, "could not find first log file name") ||
		strings.Contains(m, "could not find gtid state"):
		return fault.With(fault.ErrBinlogPurged,
			"the source no longer has the binlog tidemark must resume from (purged): the changes since are gone from the server; run tidemark resnapshot --all with the run flags, then tidemark run, and keep binlogs longer (binlog_expire_logs_seconds)", err)
	}
	return fault.With(fault.ErrServerChanged,
		"the source refused to send its binlog from tidemark's position, which it does not have (another server, RESET MASTER, or a restore from a backup): run tidemark resnapshot --all with the run flags, then tidemark run", err)
}
