package mysql

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/fault"
)

func tn(schema, name string) TableName { return TableName{Schema: schema, Name: name} }

func TestParseDDL(t *testing.T) {
	shop := func(n string) TableName { return tn("shop", n) }
	for _, tc := range []struct {
		stmt string
		want DDL
	}{
		// Column changes, in order, with positions.
		{"ALTER TABLE t ADD COLUMN c int", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: AddColumn, Column: "c", Type: "int(11)"}}}},
		{"alter table `t` add c varchar(20) not null default 'x' after b, add column d bigint unsigned first",
			DDL{Kind: AlterTable, Tables: []TableName{shop("t")}, Columns: []ColumnChange{
				{Op: AddColumn, Column: "c", Type: "varchar(20)", After: "b"},
				{Op: AddColumn, Column: "d", Type: "bigint(20) unsigned", First: true}}}},
		{"ALTER TABLE t ADD COLUMN (a int, b text)", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: AddColumn, Column: "a", Type: "int(11)"}, {Op: AddColumn, Column: "b", Type: "text"}}}},
		{"ALTER TABLE t DROP COLUMN c, DROP d", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: DropColumn, Column: "c"}, {Op: DropColumn, Column: "d"}}}},
		{"ALTER TABLE t RENAME COLUMN a TO b", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: RenameColumn, Column: "a", NewName: "b"}}}},
		{"ALTER TABLE t MODIFY COLUMN a varchar(50) CHARACTER SET utf8mb4", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: ModifyColumn, Column: "a", Type: "varchar(50)"}}}},
		{"ALTER TABLE t CHANGE COLUMN a b decimal(12,2) NOT NULL AFTER c", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: ChangeColumn, Column: "a", NewName: "b", Type: "decimal(12,2)", After: "c"}}}},
		{"ALTER TABLE t CHANGE a a bigint", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: ChangeColumn, Column: "a", NewName: "a", Type: "bigint(20)"}}}},
		// MariaDB guards and options.
		{"ALTER TABLE t ADD COLUMN IF NOT EXISTS c int, ALGORITHM=INSTANT", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: AddColumn, Column: "c", Type: "int(11)", IfNotExists: true}}}},
		{"ALTER TABLE t DROP COLUMN IF EXISTS c, LOCK=NONE", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: DropColumn, Column: "c", IfExists: true}}}},
		{"ALTER TABLE IF EXISTS t ADD COLUMN c int", DDL{Kind: AlterTable, Tables: []TableName{shop("t")}, IfExists: true,
			Columns: []ColumnChange{{Op: AddColumn, Column: "c", Type: "int(11)"}}}},
		{"ALTER ONLINE TABLE t WAIT 10 ADD c int", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: AddColumn, Column: "c", Type: "int(11)"}}}},
		{"ALTER TABLE t NOWAIT DROP c", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: DropColumn, Column: "c"}}}},
		// MariaDB types the TiDB parser lacks keep their name.
		{"ALTER TABLE t ADD ip INET6, ADD `u id` UUID NULL, ADD g POINT NOT NULL", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: AddColumn, Column: "ip", Type: "inet6"}, {Op: AddColumn, Column: "u id", Type: "uuid"},
				{Op: AddColumn, Column: "g", Type: "point"}}}},
		{"ALTER TABLE t MODIFY c text COMPRESSED", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: ModifyColumn, Column: "c", Type: "text"}}}},
		// Keys.
		{"ALTER TABLE t ADD PRIMARY KEY (a)", DDL{Kind: AlterTable, Tables: []TableName{shop("t")}, KeyChanged: true, NewKey: []string{"a"}}},
		{"ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (tenant, `id`)", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			KeyChanged: true, KeyDropped: true, NewKey: []string{"tenant", "id"}}},
		{"ALTER TABLE t DROP PRIMARY KEY", DDL{Kind: AlterTable, Tables: []TableName{shop("t")}, KeyChanged: true, KeyDropped: true}},
		{"ALTER TABLE t DROP PRIMARY KEY, ADD UNIQUE KEY u (a)", DDL{Kind: AlterTable, Tables: []TableName{shop("t")}, KeyChanged: true, KeyDropped: true}},
		{"ALTER TABLE t ADD id2 int PRIMARY KEY", DDL{Kind: AlterTable, Tables: []TableName{shop("t")}, KeyChanged: true, NewKey: []string{"id2"},
			Columns: []ColumnChange{{Op: AddColumn, Column: "id2", Type: "int(11)"}}}},
		{"ALTER TABLE t ADD INDEX i (a), ENGINE=InnoDB", DDL{Kind: AlterTable, Tables: []TableName{shop("t")}}},
		{"CREATE UNIQUE INDEX u ON t (a)", DDL{Kind: AlterTable, Tables: []TableName{shop("t")}}},
		{"DROP INDEX `PRIMARY` ON other.t", DDL{Kind: AlterTable, Tables: []TableName{tn("other", "t")}, KeyChanged: true, KeyDropped: true}},
		// Tables.
		{"ALTER TABLE t RENAME TO u", DDL{Kind: AlterTable, Tables: []TableName{shop("t")}, Renames: []TableRename{{shop("t"), shop("u")}}}},
		{"RENAME TABLE a TO b, other.c TO archive.c", DDL{Kind: RenameTable, Tables: []TableName{shop("a"), tn("other", "c")},
			Renames: []TableRename{{shop("a"), shop("b")}, {tn("other", "c"), tn("archive", "c")}}}},
		{"RENAME TABLE IF EXISTS a TO b", DDL{Kind: RenameTable, Tables: []TableName{shop("a")}, IfExists: true,
			Renames: []TableRename{{shop("a"), shop("b")}}}},
		{"CREATE TABLE `ord.ers` (`ü` int primary key, `x``y` varchar(3))", DDL{Kind: CreateTable, Tables: []TableName{shop("ord.ers")}}},
		{"CREATE TABLE IF NOT EXISTS `my db`.`日本` (id int primary key) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_uca1400_ai_ci",
			DDL{Kind: CreateTable, Tables: []TableName{tn("my db", "日本")}, IfNotExists: true}},
		{"CREATE OR REPLACE TABLE t (id int primary key, ip inet4) WITH SYSTEM VERSIONING", DDL{Kind: CreateTable, Tables: []TableName{shop("t")}, OrReplace: true}},
		{"CREATE TABLE t2 LIKE t", DDL{Kind: CreateTable, Tables: []TableName{shop("t2")}, Like: &TableName{"shop", "t"}}},
		{"CREATE TABLE t (c varchar(10) CHARACTER SET utf16)", DDL{Kind: CreateTable, Tables: []TableName{shop("t")}}},
		{"DROP TABLE `t` /* generated by server */", DDL{Kind: DropTable, Tables: []TableName{shop("t")}}},
		{"DROP TABLE IF EXISTS `a`,`other`.`b` /* generated by server */", DDL{Kind: DropTable, IfExists: true,
			Tables: []TableName{shop("a"), tn("other", "b")}}},
		{"TRUNCATE t", DDL{Kind: TruncateTable, Tables: []TableName{shop("t")}}},
		{"truncate table `other`.`t`", DDL{Kind: TruncateTable, Tables: []TableName{tn("other", "t")}}},
		{"CREATE DATABASE IF NOT EXISTS shop2", DDL{Kind: CreateDatabase, Database: "shop2", IfNotExists: true}},
		{"DROP SCHEMA shop2", DDL{Kind: DropDatabase, Database: "shop2"}},
		{"/* a comment */ ALTER TABLE t DROP c", DDL{Kind: AlterTable, Tables: []TableName{shop("t")},
			Columns: []ColumnChange{{Op: DropColumn, Column: "c"}}}},
		// Not schema: never parsed.
		{"BEGIN", DDL{}},
		{"SAVEPOINT `sp1`", DDL{}},
		{"XA START X'01'", DDL{}},
		{"COMMIT", DDL{}},
		{"GRANT SELECT ON shop.* TO 'u'@'%'", DDL{}},
		{"CREATE USER 'u'@'%' IDENTIFIED BY 'hunter2", DDL{}}, // unparseable and secret: not quoted anywhere
		{"CREATE OR REPLACE USER u", DDL{}},
		{"SET PASSWORD FOR u = PASSWORD('x')", DDL{}},
		{"CREATE TEMPORARY TABLE tmp (a int)", DDL{}},
		{"DROP TEMPORARY TABLE IF EXISTS `tmp` /* generated by server */", DDL{}},
		{"CREATE DEFINER=`root`@`localhost` TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET NEW.a = 1", DDL{}},
		{"CREATE VIEW v AS SELECT 1", DDL{}},
		{"DROP VIEW v", DDL{}},
		{"/*!40101 SET NAMES utf8mb4 */", DDL{}},
		{"ANALYZE TABLE t", DDL{}},
	} {
		got, err := ParseDDL("shop", tc.stmt)
		if err != nil {
			t.Errorf("ParseDDL(%q): %v", tc.stmt, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseDDL(%q)\n got %+v\nwant %+v", tc.stmt, got, tc.want)
		}
	}
}

// TestParseDDLErrors: a schema statement that cannot be read is the named
// error unsupported_ddl (exit 3) quoting it, never a skip.
func TestParseDDLErrors(t *testing.T) {
	for _, stmt := range []string{
		"ALTER TABLE t ADD COLUMN",
		"ALTER TABLE t FROBNICATE c",
		"CREATE TABLE t (a int, PERIOD FOR p(s, e))",
		"ALTER TABLE t ADD c int,, ADD d int",
	} {
		_, err := ParseDDL("shop", stmt)
		if !errors.Is(err, fault.ErrUnsupportedDDL) || fault.ExitCode(err) != fault.ExitFatal {
			t.Errorf("ParseDDL(%q): %v, want [unsupported_ddl]", stmt, err)
			continue
		}
		if !strings.Contains(err.Error(), stmt) || !strings.Contains(err.Error(), `"shop"`) {
			t.Errorf("ParseDDL(%q): error %q does not quote the statement and schema", stmt, err)
		}
	}
	// An unqualified table without a default schema cannot be resolved.
	if _, err := ParseDDL("", "TRUNCATE t"); !errors.Is(err, fault.ErrUnsupportedDDL) || !strings.Contains(err.Error(), "no default schema") {
		t.Errorf("TRUNCATE without a default schema: %v", err)
	}
	if d, err := ParseDDL("", "TRUNCATE s.t"); err != nil || !reflect.DeepEqual(d.Tables, []TableName{tn("s", "t")}) {
		t.Errorf("TRUNCATE s.t without a default schema: %+v %v", d, err)
	}
}

func TestParseDDLANSIQuotes(t *testing.T) {
	p := DDLParser{ANSIQuotes: true}
	d, err := p.Parse("shop", `ALTER TABLE "order items" RENAME COLUMN "a" TO "b"`)
	if err != nil {
		t.Fatal(err)
	}
	want := DDL{Kind: AlterTable, Tables: []TableName{tn("shop", "order items")}, Columns: []ColumnChange{{Op: RenameColumn, Column: "a", NewName: "b"}}}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("got %+v", d)
	}
	// The same parser, reused, without ANSI_QUOTES.
	p.ANSIQuotes = false
	if d, err := p.Parse("shop", "ALTER TABLE t ADD c varchar(3) DEFAULT \"x\""); err != nil || d.Columns[0].Type != "varchar(3)" {
		t.Errorf("reuse: %+v %v", d, err)
	}
}

func TestQueryEventSQLMode(t *testing.T) {
	le := func(v uint64, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		return b
	}
	vars := append([]byte{0}, le(0, 4)...)                          // Q_FLAGS2_CODE
	vars = append(vars, 1)                                          // Q_SQL_MODE_CODE
	vars = append(vars, le(1<<2|1<<20|1<<21, 8)...)                 // ANSI_QUOTES, NO_BACKSLASH_ESCAPES, STRICT_TRANS_TABLES
	vars = append(vars, 6, 3, 's', 't', 'd', 4, 45, 0, 45, 0, 8, 0) // catalog, charset (after: not read)
	m, ok := QueryEventSQLMode(vars)
	if !ok || !m.ANSIQuotes() || !m.NoBackslashEscapes() {
		t.Errorf("QueryEventSQLMode = %#x, %v", m, ok)
	}
	// The catalog before sql_mode (old servers) is stepped over.
	old := append([]byte{6, 3, 's', 't', 'd', 1}, le(1<<21, 8)...)
	if m, ok := QueryEventSQLMode(old); !ok || m.ANSIQuotes() || m.NoBackslashEscapes() {
		t.Errorf("after a catalog: %#x, %v", m, ok)
	}
	for _, bad := range [][]byte{nil, {0, 1, 2}, {1, 4, 0}, {200, 1, 2, 3}} {
		if _, ok := QueryEventSQLMode(bad); ok {
			t.Errorf("QueryEventSQLMode(%v): ok", bad)
		}
	}
}
