package mysql

import (
	"errors"
	"fmt"
	"io"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	sqldriver "github.com/go-sql-driver/mysql"
	pingcaperrors "github.com/pingcap/errors"

	"github.com/tidemark/tidemark/internal/fault"
)

func TestClassify(t *testing.T) {
	query := func(n uint16, msg string) error {
		return fmt.Errorf("read x: %w", &sqldriver.MySQLError{Number: n, Message: msg})
	}
	// go-mysql wraps the binlog server's errors with pingcap/errors.
	stream := func(n uint16, msg string) error { return pingcaperrors.Trace(&gomysql.MyError{Code: n, Message: msg}) }
	for _, tc := range []struct {
		name string
		err  error
		code string // "" = unchanged
		cls  fault.Class
	}{
		{"bad password", query(1045, "Access denied for user 'u'@'h' (using password: YES)"), "bad_config", fault.Config},
		{"unknown db", query(1049, "Unknown database 'shop'"), "bad_config", fault.Config},
		{"no db access", query(1044, "Access denied for user 'u'@'%' to database 'shop'"), "permission_denied", fault.Fatal},
		{"no privilege", query(1227, "Access denied; you need (at least one of) the BINLOG MONITOR privilege(s)"), "permission_denied", fault.Fatal},
		{"no table select", query(1142, "SELECT command denied to user"), "permission_denied", fault.Fatal},
		{"shutdown", query(1053, "Server shutdown in progress"), "transient", fault.Transient},
		{"killed", query(1927, "Connection was killed"), "transient", fault.Transient},
		{"deadlock", query(1213, "Deadlock found"), "transient", fault.Transient},
		{"mariadb gtid purged", stream(1236, "Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged."), "binlog_purged", fault.Fatal},
		{"file purged", stream(1236, "Could not find first log file name in binary log index file"), "binlog_purged", fault.Fatal},
		{"mysql gtid purged", stream(1236, "Cannot replicate because the source purged required binary logs. Replicate the missing transactions from elsewhere"), "binlog_purged", fault.Fatal},
		{"mysql same server_id", stream(1236, "A replica with the same server_uuid/server_id as this replica has connected to the source"), "server_id_conflict", fault.Config},
		{"mariadb diverged", stream(1236, "Error: connecting slave requested to start from GTID 0-1-99, which is not in the master's binlog"), "server_changed", fault.Fatal},
		{"eof", io.ErrUnexpectedEOF, "transient", fault.Transient},
		{"bad conn", sqldriver.ErrInvalidConn, "transient", fault.Transient},
		{"syntax", query(1064, "You have an error in your SQL syntax"), "", fault.Unknown},
		{"already classified", fault.With(fault.ErrCorruptState, "x", query(1053, "shutdown")), "corrupt_state", fault.Fatal},
	} {
		got := Classify(tc.err)
		if !errors.Is(got, tc.err) && got != tc.err {
			t.Errorf("%s: the cause is lost: %v", tc.name, got)
		}
		var fe *fault.Error
		if tc.code == "" {
			if errors.As(got, &fe) {
				t.Errorf("%s: classified as %s, want unchanged", tc.name, fe.Code)
			}
			continue
		}
		if !errors.As(got, &fe) || fe.Code != tc.code || fault.ClassOf(got) != tc.cls {
			t.Errorf("%s: %v (class %s), want [%s] %s", tc.name, got, fault.ClassOf(got), tc.code, tc.cls)
		}
	}
	if Classify(nil) != nil {
		t.Error("Classify(nil) != nil")
	}
}
