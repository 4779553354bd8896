package mysql

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestParseDDLFromBinlog runs DDL on a real MariaDB and parses the QUERY
// events as the server wrote them to its binlog (it rewrites some: DROP
// TABLE gains a comment, IF EXISTS guards stay, names are quoted as typed).
func TestParseDDLFromBinlog(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	db := m.CreateDB(t, "ddl")
	start := m.GTIDPos(t)
	stmts := []struct {
		sql  string
		kind DDLKind
		want string // the first table, `schema`.`name`
		mode string // the session's sql_mode, if not the default
	}{
		{"CREATE TABLE `ord.ers` (id int PRIMARY KEY, `ü` varchar(10), ip INET6, g POINT, u UUID)", CreateTable, "`" + db + "`.`ord.ers`", ""},
		{"ALTER TABLE `ord.ers` ADD COLUMN IF NOT EXISTS c int, ALGORITHM=INSTANT", AlterTable, "`" + db + "`.`ord.ers`", ""},
		{"ALTER TABLE IF EXISTS `ord.ers` RENAME COLUMN c TO d", AlterTable, "`" + db + "`.`ord.ers`", ""},
		{"ALTER TABLE `ord.ers` CHANGE d e bigint unsigned, MODIFY `ü` text COMPRESSED", AlterTable, "`" + db + "`.`ord.ers`", ""},
		{"ALTER TABLE `ord.ers` DROP COLUMN IF EXISTS e", AlterTable, "`" + db + "`.`ord.ers`", ""},
		// Under ANSI_QUOTES "x" names a column; under NO_BACKSLASH_ESCAPES
		// 'a\' is a whole string: the event's sql_mode says how to read it.
		{`ALTER TABLE "ord.ers" ADD "q" varchar(5) DEFAULT 'a\'`, AlterTable, "`" + db + "`.`ord.ers`", "ANSI_QUOTES,NO_BACKSLASH_ESCAPES"},
		{"CREATE TABLE v1 (id int PRIMARY KEY) WITH SYSTEM VERSIONING", CreateTable, "`" + db + "`.`v1`", ""},
		{"DROP TABLE v1", DropTable, "`" + db + "`.`v1`", ""},
		{"CREATE OR REPLACE TABLE t2 (id int PRIMARY KEY, a inet4)", CreateTable, "`" + db + "`.`t2`", ""},
		{"RENAME TABLE t2 TO t3", RenameTable, "`" + db + "`.`t2`", ""},
		{"TRUNCATE t3", TruncateTable, "`" + db + "`.`t3`", ""},
		{"DROP TABLE IF EXISTS t3, nope", DropTable, "`" + db + "`.`t3`", ""},
	}
	for _, s := range stmts {
		if s.mode != "" {
			m.ExecIn(t, db, "SET SESSION sql_mode = '"+s.mode+"'; "+s.sql+"; SET SESSION sql_mode = DEFAULT")
			continue
		}
		m.ExecIn(t, db, s.sql)
	}
	gset, err := ParseGTIDSet(MariaDB, start)
	if err != nil {
		t.Fatal(err)
	}
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{
		ServerID: 9001, Flavor: "mariadb", Host: m.Host, Port: uint16(m.Port), User: m.User, Password: m.Password,
	})
	defer syncer.Close()
	st, err := syncer.StartSyncGTID(gset.GoMySQL())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var p DDLParser
	for i := 0; i < len(stmts); {
		ev, err := st.GetEvent(ctx)
		if err != nil {
			t.Fatalf("binlog: %v (after %d of %d statements)", err, i, len(stmts))
		}
		q, ok := ev.Event.(*replication.QueryEvent)
		if !ok || string(q.Schema) != db {
			continue
		}
		mode, ok := QueryEventSQLMode(q.StatusVars)
		if !ok {
			t.Fatalf("no sql_mode in the status variables of %q", q.Query)
		}
		p.ANSIQuotes, p.NoBackslashEscapes = mode.ANSIQuotes(), mode.NoBackslashEscapes()
		d, err := p.Parse(string(q.Schema), string(q.Query))
		if err != nil {
			t.Errorf("binlog statement %q: %v", q.Query, err)
			i++
			continue
		}
		if d.Kind == NotSchema {
			continue // BEGIN
		}
		want := stmts[i]
		if (want.mode != "") != p.ANSIQuotes || (want.mode != "") != p.NoBackslashEscapes {
			t.Errorf("%q: sql_mode %#x from the event, written under %q", q.Query, mode, want.mode)
		}
		if d.Kind != want.kind || len(d.Tables) == 0 || d.Tables[0].String() != want.want {
			t.Errorf("binlog statement %q (from %q): %+v, want %s of %s", q.Query, want.sql, d, want.kind, want.want)
		}
		t.Logf("%s -> %s", q.Query, fmt.Sprintf("%+v", d))
		i++
	}
}
