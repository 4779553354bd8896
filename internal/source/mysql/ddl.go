package mysql

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	tidbmysql "github.com/pingcap/tidb/pkg/parser/mysql"
	_ "github.com/pingcap/tidb/pkg/parser/test_driver" // value expressions (DEFAULT 'x') need a driver

	"github.com/tidemark/tidemark/internal/fault"
)

// DDLKind is what a statement of a binlog QUERY event does to the schema.
type DDLKind string

const (
	NotSchema      DDLKind = ""                // BEGIN, SAVEPOINT, GRANT, views, routines, temporary tables...
	CreateTable    DDLKind = "create_table"    // CREATE [OR REPLACE] TABLE, ... LIKE, ... SELECT
	DropTable      DDLKind = "drop_table"      // DROP TABLE a, b
	RenameTable    DDLKind = "rename_table"    // RENAME TABLE a TO b, c TO d
	TruncateTable  DDLKind = "truncate_table"  // TRUNCATE [TABLE] t
	AlterTable     DDLKind = "alter_table"     // ALTER TABLE, CREATE/DROP INDEX
	CreateDatabase DDLKind = "create_database" // CREATE DATABASE / SCHEMA
	DropDatabase   DDLKind = "drop_database"   // DROP DATABASE / SCHEMA: drops its tables
)

// TableName is a table resolved against the statement's default schema.
type TableName struct {
	Schema string
	Name   string
}

func (n TableName) String() string {
	q := func(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
	return q(n.Schema) + "." + q(n.Name)
}

// TableRename is one rename of RENAME TABLE or ALTER TABLE ... RENAME TO.
type TableRename struct {
	From, To TableName
}

// ColumnOp is what an ALTER TABLE clause does to a column.
type ColumnOp string

const (
	AddColumn    ColumnOp = "add"
	DropColumn   ColumnOp = "drop"
	RenameColumn ColumnOp = "rename" // RENAME COLUMN a TO b: the type stays
	ModifyColumn ColumnOp = "modify" // MODIFY a <new definition>
	ChangeColumn ColumnOp = "change" // CHANGE a b <new definition>: rename and redefine
)

// ColumnChange is one column clause of an ALTER TABLE, in statement order.
type ColumnChange struct {
	Op      ColumnOp
	Column  string // the column as it was (AddColumn: the new column)
	NewName string // RenameColumn, ChangeColumn (may equal Column)
	Type    string // AddColumn, ModifyColumn, ChangeColumn: the new type ("varchar(20)", "inet6")
	First   bool   // placed first
	After   string // placed after this column
	// IfExists / IfNotExists: MariaDB's DROP COLUMN IF EXISTS and ADD
	// COLUMN IF NOT EXISTS, which do nothing when the column is
	// absent / present; the table's next row events tell which happened.
	IfExists, IfNotExists bool
}

// DDL is the source-neutral description of one schema statement.
type DDL struct {
	Kind DDLKind
	// Tables are the tables the statement changes: ALTER, CREATE, TRUNCATE
	// one; DROP TABLE each; RENAME TABLE the old names.
	Tables     []TableName
	Renames    []TableRename  // RENAME TABLE, ALTER TABLE ... RENAME TO
	Columns    []ColumnChange // ALTER TABLE
	KeyChanged bool           // ALTER TABLE adds or drops the primary key, or a column clause declares one
	// KeyDropped: the statement drops the primary key (DROP PRIMARY KEY,
	// DROP INDEX `PRIMARY`). NewKey is the primary key it declares (ADD
	// PRIMARY KEY (a, b), a column's PRIMARY KEY option), its columns in
	// order; nil for none. KeyDropped with no NewKey leaves the table
	// without a primary key.
	KeyDropped bool
	NewKey     []string
	Like       *TableName // CREATE TABLE ... LIKE this
	Database   string     // CREATE/DROP DATABASE
	// OrReplace: MariaDB's CREATE OR REPLACE TABLE, which drops a table of
	// that name first. IfExists / IfNotExists: the statement's guard
	// (DROP TABLE IF EXISTS, ALTER TABLE IF EXISTS, CREATE TABLE IF NOT EXISTS).
	OrReplace, IfExists, IfNotExists bool
}

// DDLParser parses the statements of binlog QUERY events with the TiDB SQL
// parser. It is not safe for concurrent use; the zero value is ready.
type DDLParser struct {
	// ANSIQuotes and NoBackslashEscapes: the statement was written under
	// sql_mode ANSI_QUOTES ("x" is an identifier, not a string) or
	// NO_BACKSLASH_ESCAPES, as its QUERY event says (QueryEventSQLMode).
	ANSIQuotes, NoBackslashEscapes bool

	p *parser.Parser
}

// ParseDDL parses one statement with a fresh DDLParser.
func ParseDDL(defaultSchema, statement string) (DDL, error) {
	var p DDLParser
	return p.Parse(defaultSchema, statement)
}

// Parse describes statement, the text of a binlog QUERY event whose default
// schema (the event's database) is defaultSchema. Statements that do not
// change a table's shape return Kind NotSchema: transaction control, account
// management (never parsed, so their passwords are in no error), views,
// routines, triggers, events, temporary tables. A schema statement that the
// parser cannot read returns an unsupported_ddl error that quotes it; a
// stream must stop there rather than skip it.
//
// The TiDB parser knows MySQL's grammar; MariaDB's additions are handled
// where the parser stops at them (its error says at which token): the
// guards ALTER TABLE IF EXISTS and RENAME TABLE IF EXISTS, WAIT n / NOWAIT,
// ALTER ONLINE, CREATE OR REPLACE TABLE, [WITH|WITHOUT] SYSTEM VERSIONING,
// COMPRESSED columns, the types INET4, INET6, UUID and the spatial types, and
// collations and character sets TiDB does not have. Each is removed or
// replaced at that token, and the statement parsed again.
func (dp *DDLParser) Parse(defaultSchema, statement string) (DDL, error) {
	kind := classify(statement)
	if kind == NotSchema {
		return DDL{}, nil
	}
	if dp.p == nil {
		dp.p = parser.New()
	}
	var mode tidbmysql.SQLMode
	if dp.ANSIQuotes {
		mode |= tidbmysql.ModeANSIQuotes
	}
	if dp.NoBackslashEscapes {
		mode |= tidbmysql.ModeNoBackslashEscapes
	}
	dp.p.SetSQLMode(mode)
	fail := func(err error) (DDL, error) {
		return DDL{}, fault.With(fault.ErrUnsupportedDDL, fmt.Sprintf(
			"cannot parse the schema statement in the binlog (default schema %q): %s", defaultSchema, statement), err)
	}
	text := statement
	var fix fixups
	var stmts []ast.StmtNode
	for attempt := 0; ; attempt++ {
		var err error
		stmts, _, err = dp.p.Parse(text, "utf8mb4", "")
		if err == nil {
			break
		}
		next, ok := fix.rewrite(text, err)
		if !ok || attempt >= 32 {
			return fail(err)
		}
		text = next
	}
	if len(stmts) != 1 {
		return fail(fmt.Errorf("%d statements in one event", len(stmts)))
	}
	d, err := describe(stmts[0], defaultSchema, &fix)
	if err != nil {
		return fail(err)
	}
	d.OrReplace = d.OrReplace || fix.orReplace
	d.IfExists = d.IfExists || fix.ifExists
	return d, nil
}

// classify tells from the leading keywords whether a statement may change
// a table's shape. Only those are parsed.
func classify(stmt string) DDLKind {
	toks := leadingWords(stmt, 6)
	at := func(i int) string {
		if i < len(toks) {
			return toks[i]
		}
		return ""
	}
	switch at(0) {
	case "ALTER":
		i := 1
		for at(i) == "ONLINE" || at(i) == "IGNORE" {
			i++
		}
		if at(i) == "TABLE" {
			return AlterTable
		}
	case "CREATE":
		i := 1
		if at(i) == "OR" && at(i+1) == "REPLACE" {
			i += 2
		}
		switch at(i) {
		case "TABLE":
			return CreateTable
		case "DATABASE", "SCHEMA":
			return CreateDatabase
		case "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL", "ONLINE", "OFFLINE":
			return AlterTable
		}
	case "DROP":
		switch at(1) {
		case "TABLE":
			return DropTable
		case "DATABASE", "SCHEMA":
			return DropDatabase
		case "INDEX", "ONLINE", "OFFLINE":
			return AlterTable
		}
	case "RENAME":
		if at(1) == "TABLE" {
			return RenameTable
		}
	case "TRUNCATE":
		return TruncateTable
	}
	return NotSchema
}

// leadingWords returns the first n bare words of stmt in upper case,
// skipping comments and reading into executable comments (/*!40101 ...*/,
// /*M!100100 ...*/), which the server runs. It stops at the first token
// that is not a bare word.
func leadingWords(stmt string, n int) []string {
	var out []string
	s := stmt
	for len(out) < n {
		s = strings.TrimLeft(s, " \t\r\n\f")
		switch {
		case s == "":
			return out
		case strings.HasPrefix(s, "/*!") || strings.HasPrefix(s, "/*M!"):
			s = s[strings.IndexByte(s, '!')+1:]
			s = strings.TrimLeft(s, "0123456789")
			continue
		case strings.HasPrefix(s, "*/"):
			s = s[2:]
			continue
		case strings.HasPrefix(s, "/*"):
			end := strings.Index(s[2:], "*/")
			if end < 0 {
				return out
			}
			s = s[end+4:]
			continue
		case strings.HasPrefix(s, "#") || strings.HasPrefix(s, "-- "):
			nl := strings.IndexByte(s, '\n')
			if nl < 0 {
				return out
			}
			s = s[nl+1:]
			continue
		}
		i := 0
		for i < len(s) && (s[i] == '_' || s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z') {
			i++
		}
		if i == 0 {
			return out
		}
		out = append(out, strings.ToUpper(s[:i]))
		s = s[i:]
	}
	return out
}

// fixups records the MariaDB syntax removed or replaced for the parser.
type fixups struct {
	orReplace bool
	ifExists  bool
	// types maps a column name (as written, unquoted) to the type word that
	// was replaced by a stand-in the parser knows.
	types map[string]string
}

// mariaDBTypes are column types MariaDB has and the TiDB parser does not,
// stood in for by BLOB (the description reports the original word).
var mariaDBTypes = map[string]bool{
	"INET4": true, "INET6": true, "UUID": true,
	"GEOMETRY": true, "POINT": true, "LINESTRING": true, "POLYGON": true, "MULTIPOINT": true,
	"MULTILINESTRING": true, "MULTIPOLYGON": true, "GEOMETRYCOLLECTION": true, "GEOMCOLLECTION": true,
}

var (
	nearRE      = regexp.MustCompile(`line \d+ column \d+ near "`)
	totalLenRE  = regexp.MustCompile(`\(total length (\d+)\)\s*$`)
	collationRE = regexp.MustCompile(`Unknown collation: '([^']*)'`)
	charsetRE   = regexp.MustCompile(`Unknown character set: '([^']*)'`)
)

// rewrite returns text changed at the token where the parser stopped (err),
// when that token starts one of the MariaDB additions Parse lists.
func (f *fixups) rewrite(text string, err error) (string, bool) {
	msg := err.Error()
	if m := collationRE.FindStringSubmatch(msg); m != nil {
		return replaceWord(text, m[1], "utf8mb4_bin")
	}
	if m := charsetRE.FindStringSubmatch(msg); m != nil {
		return replaceWord(text, m[1], "utf8mb4")
	}
	off, ok := errorOffset(text, msg)
	if !ok {
		return "", false
	}
	toks := lexFrom(text, off, 3)
	if len(toks) == 0 {
		return "", false
	}
	w := func(i int) string {
		if i < len(toks) && toks[i].word {
			return strings.ToUpper(toks[i].text)
		}
		return ""
	}
	cut := func(from, to int) string { return text[:from] + " " + text[to:] }
	switch t0 := w(0); {
	case t0 == "IF" && w(1) == "EXISTS":
		f.ifExists = true
		return cut(toks[0].start, toks[1].end), true
	case t0 == "WAIT" && len(toks) > 1 && toks[1].number:
		return cut(toks[0].start, toks[1].end), true
	case t0 == "NOWAIT" || t0 == "ONLINE" || t0 == "COMPRESSED":
		end := toks[0].end
		if t0 == "COMPRESSED" && len(toks) > 2 && toks[1].text == "=" && toks[2].word { // COMPRESSED=zlib
			end = toks[2].end
		}
		return cut(toks[0].start, end), true
	case t0 == "WITH" || t0 == "WITHOUT" || t0 == "SYSTEM" || t0 == "VERSIONING":
		// [WITH|WITHOUT] SYSTEM VERSIONING: the parser may stop at any of
		// the three words; look back up to two words for its start.
		for _, start := range wordStarts(text, toks[0].start, 2) {
			v := lexFrom(text, start, 3)
			if len(v) == 3 && (strings.EqualFold(v[0].text, "WITH") || strings.EqualFold(v[0].text, "WITHOUT")) &&
				strings.EqualFold(v[1].text, "SYSTEM") && strings.EqualFold(v[2].text, "VERSIONING") && v[2].end >= toks[0].end {
				return cut(v[0].start, v[2].end), true
			}
		}
	case t0 == "TABLE":
		// CREATE OR REPLACE TABLE: the parser took OR REPLACE for a view's.
		before := strings.TrimRight(text[:toks[0].start], " \t\r\n")
		up := strings.ToUpper(before)
		if strings.HasSuffix(up, "REPLACE") {
			b := strings.TrimRight(before[:len(before)-len("REPLACE")], " \t\r\n")
			if strings.HasSuffix(strings.ToUpper(b), "OR") {
				f.orReplace = true
				return b[:len(b)-2] + " " + text[toks[0].start:], true
			}
		}
	case mariaDBTypes[t0]:
		col := precedingIdent(text, toks[0].start)
		if col == "" {
			return "", false
		}
		if f.types == nil {
			f.types = map[string]string{}
		}
		f.types[col] = strings.ToLower(t0)
		return text[:toks[0].start] + "BLOB" + text[toks[0].end:], true
	}
	return "", false
}

// errorOffset finds the byte offset in text at which the parser stopped,
// from its message: `line L column C near "<the rest of the text>"...`,
// the rest cut at 2048 bytes with "(total length N)" appended.
func errorOffset(text, msg string) (int, bool) {
	loc := nearRE.FindStringIndex(msg)
	if loc == nil {
		return 0, false
	}
	rest := msg[loc[1]:]
	if m := totalLenRE.FindStringSubmatch(msg); m != nil {
		var n int
		fmt.Sscan(m[1], &n)
		if n <= len(text) {
			return len(text) - n, true
		}
		return 0, false
	}
	for off := 0; off < len(text); off++ {
		if strings.HasPrefix(rest, text[off:]+`"`) {
			return off, true
		}
	}
	return 0, false
}

// token is a lexical token of lexFrom.
type token struct {
	text       string
	start, end int
	word       bool // bare word (keyword or unquoted identifier)
	number     bool
}

// lexFrom returns up to n tokens of text from offset off, skipping
// whitespace and comments.
func lexFrom(text string, off, n int) []token {
	var out []token
	i := off
	for i < len(text) && len(out) < n {
		c := text[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case strings.HasPrefix(text[i:], "/*"):
			end := strings.Index(text[i+2:], "*/")
			if end < 0 {
				return out
			}
			i += end + 4
		case isWordByte(c):
			j := i
			for j < len(text) && isWordByte(text[j]) {
				j++
			}
			tok := token{text: text[i:j], start: i, end: j, word: true}
			tok.number = strings.Trim(tok.text, "0123456789") == ""
			tok.word = !tok.number
			out = append(out, tok)
			i = j
		default:
			out = append(out, token{text: text[i : i+1], start: i, end: i + 1})
			i++
		}
	}
	return out
}

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// wordStarts returns off and the offsets of up to n bare words before it,
// nearest first.
func wordStarts(text string, off, n int) []int {
	out := []int{off}
	i := off
	for len(out) <= n {
		for i > 0 && (text[i-1] == ' ' || text[i-1] == '\t' || text[i-1] == '\n' || text[i-1] == '\r') {
			i--
		}
		j := i
		for j > 0 && isWordByte(text[j-1]) {
			j--
		}
		if j == i {
			break
		}
		out = append(out, j)
		i = j
	}
	return out
}

// precedingIdent returns the identifier just before offset off (a bare word
// or a `quoted` name, unquoted), or "".
func precedingIdent(text string, off int) string {
	s := strings.TrimRight(text[:off], " \t\r\n")
	if strings.HasSuffix(s, "`") {
		// Walk back over a backquoted name (`` is an escaped backquote).
		i := len(s) - 2
		for i >= 0 {
			if s[i] == '`' {
				if i > 0 && s[i-1] == '`' {
					i -= 2
					continue
				}
				return strings.ReplaceAll(s[i+1:len(s)-1], "``", "`")
			}
			i--
		}
		return ""
	}
	j := len(s)
	for j > 0 && isWordByte(s[j-1]) {
		j--
	}
	return s[j:]
}

// replaceWord replaces every bare or quoted occurrence of word (a collation
// or character set name) in text by with.
func replaceWord(text, word, with string) (string, bool) {
	if word == "" {
		return "", false
	}
	changed := false
	var b strings.Builder
	i := 0
	for i < len(text) {
		if c := text[i]; c == '\'' || c == '"' || c == '`' {
			j := i + 1
			for j < len(text) && text[j] != c {
				if text[j] == '\\' {
					j++
				}
				j++
			}
			if j < len(text) && strings.EqualFold(text[i+1:j], word) {
				b.WriteString(string(c) + with + string(c))
				changed = true
			} else if j < len(text) {
				b.WriteString(text[i : j+1])
			} else {
				b.WriteString(text[i:])
			}
			i = j + 1
			continue
		}
		if isWordByte(text[i]) {
			j := i
			for j < len(text) && isWordByte(text[j]) {
				j++
			}
			if strings.EqualFold(text[i:j], word) {
				b.WriteString(with)
				changed = true
			} else {
				b.WriteString(text[i:j])
			}
			i = j
			continue
		}
		b.WriteByte(text[i])
		i++
	}
	return b.String(), changed
}

// describe turns a parsed statement into a DDL.
func describe(stmt ast.StmtNode, defaultSchema string, fix *fixups) (DDL, error) {
	resolve := func(t *ast.TableName) (TableName, error) {
		schema := t.Schema.O
		if schema == "" {
			schema = defaultSchema
		}
		if schema == "" {
			return TableName{}, fmt.Errorf("table %q has no schema and the event has no default schema", t.Name.O)
		}
		return TableName{Schema: schema, Name: t.Name.O}, nil
	}
	var d DDL
	switch s := stmt.(type) {
	case *ast.CreateTableStmt:
		if s.TemporaryKeyword != ast.TemporaryNone {
			return DDL{}, nil
		}
		t, err := resolve(s.Table)
		if err != nil {
			return DDL{}, err
		}
		d = DDL{Kind: CreateTable, Tables: []TableName{t}, IfNotExists: s.IfNotExists}
		if s.ReferTable != nil {
			like, err := resolve(s.ReferTable)
			if err != nil {
				return DDL{}, err
			}
			d.Like = &like
		}
	case *ast.DropTableStmt:
		if s.IsView || s.TemporaryKeyword != ast.TemporaryNone {
			return DDL{}, nil
		}
		d = DDL{Kind: DropTable, IfExists: s.IfExists}
		for _, tn := range s.Tables {
			t, err := resolve(tn)
			if err != nil {
				return DDL{}, err
			}
			d.Tables = append(d.Tables, t)
		}
	case *ast.RenameTableStmt:
		d = DDL{Kind: RenameTable}
		for _, tt := range s.TableToTables {
			from, err := resolve(tt.OldTable)
			if err != nil {
				return DDL{}, err
			}
			to, err := resolve(tt.NewTable)
			if err != nil {
				return DDL{}, err
			}
			d.Tables = append(d.Tables, from)
			d.Renames = append(d.Renames, TableRename{From: from, To: to})
		}
	case *ast.TruncateTableStmt:
		t, err := resolve(s.Table)
		if err != nil {
			return DDL{}, err
		}
		d = DDL{Kind: TruncateTable, Tables: []TableName{t}}
	case *ast.CreateDatabaseStmt:
		d = DDL{Kind: CreateDatabase, Database: s.Name.O, IfNotExists: s.IfNotExists}
	case *ast.DropDatabaseStmt:
		d = DDL{Kind: DropDatabase, Database: s.Name.O, IfExists: s.IfExists}
	case *ast.CreateIndexStmt:
		t, err := resolve(s.Table)
		if err != nil {
			return DDL{}, err
		}
		d = DDL{Kind: AlterTable, Tables: []TableName{t}}
	case *ast.DropIndexStmt:
		t, err := resolve(s.Table)
		if err != nil {
			return DDL{}, err
		}
		primary := strings.EqualFold(s.IndexName, "PRIMARY")
		d = DDL{Kind: AlterTable, Tables: []TableName{t}, KeyChanged: primary, KeyDropped: primary}
	case *ast.AlterTableStmt:
		t, err := resolve(s.Table)
		if err != nil {
			return DDL{}, err
		}
		d = DDL{Kind: AlterTable, Tables: []TableName{t}}
		for _, spec := range s.Specs {
			if err := describeSpec(&d, t, spec, resolve, fix); err != nil {
				return DDL{}, err
			}
		}
	default:
		return DDL{}, nil // CREATE VIEW, CREATE SEQUENCE, ...: no table shape changes
	}
	return d, nil
}

func describeSpec(d *DDL, t TableName, spec *ast.AlterTableSpec, resolve func(*ast.TableName) (TableName, error), fix *fixups) error {
	typeOf := func(col *ast.ColumnDef) string {
		if w, ok := fix.types[col.Name.Name.O]; ok {
			return w
		}
		if col.Tp == nil {
			return ""
		}
		return col.Tp.InfoSchemaStr()
	}
	declaresKey := func(col *ast.ColumnDef) bool {
		for _, o := range col.Options {
			if o.Tp == ast.ColumnOptionPrimaryKey {
				d.NewKey = []string{col.Name.Name.O}
				return true
			}
		}
		return false
	}
	place := func(c *ColumnChange) {
		if spec.Position == nil {
			return
		}
		switch spec.Position.Tp {
		case ast.ColumnPositionFirst:
			c.First = true
		case ast.ColumnPositionAfter:
			c.After = spec.Position.RelativeColumn.Name.O
		}
	}
	switch spec.Tp {
	case ast.AlterTableAddColumns:
		for _, col := range spec.NewColumns {
			c := ColumnChange{Op: AddColumn, Column: col.Name.Name.O, Type: typeOf(col), IfNotExists: spec.IfNotExists}
			place(&c)
			d.Columns = append(d.Columns, c)
			d.KeyChanged = d.KeyChanged || declaresKey(col)
		}
	case ast.AlterTableDropColumn:
		d.Columns = append(d.Columns, ColumnChange{Op: DropColumn, Column: spec.OldColumnName.Name.O, IfExists: spec.IfExists})
	case ast.AlterTableRenameColumn:
		d.Columns = append(d.Columns, ColumnChange{Op: RenameColumn, Column: spec.OldColumnName.Name.O, NewName: spec.NewColumnName.Name.O})
	case ast.AlterTableModifyColumn:
		col := spec.NewColumns[0]
		c := ColumnChange{Op: ModifyColumn, Column: col.Name.Name.O, Type: typeOf(col), IfExists: spec.IfExists}
		place(&c)
		d.Columns = append(d.Columns, c)
		d.KeyChanged = d.KeyChanged || declaresKey(col)
	case ast.AlterTableChangeColumn:
		col := spec.NewColumns[0]
		c := ColumnChange{Op: ChangeColumn, Column: spec.OldColumnName.Name.O, NewName: col.Name.Name.O, Type: typeOf(col), IfExists: spec.IfExists}
		place(&c)
		d.Columns = append(d.Columns, c)
		d.KeyChanged = d.KeyChanged || declaresKey(col)
	case ast.AlterTableRenameTable:
		to, err := resolve(spec.NewTable)
		if err != nil {
			return err
		}
		d.Renames = append(d.Renames, TableRename{From: t, To: to})
	case ast.AlterTableAddConstraint:
		if spec.Constraint != nil && spec.Constraint.Tp == ast.ConstraintPrimaryKey {
			d.KeyChanged = true
			d.NewKey = nil
			for _, k := range spec.Constraint.Keys {
				if k.Column != nil {
					d.NewKey = append(d.NewKey, k.Column.Name.O)
				}
			}
		}
	case ast.AlterTableDropPrimaryKey:
		d.KeyChanged, d.KeyDropped = true, true
	case ast.AlterTableDropIndex:
		if strings.EqualFold(spec.Name, "PRIMARY") {
			d.KeyChanged, d.KeyDropped = true, true
		}
	}
	return nil
}

// SQLMode is the sql_mode a statement was written under, as the server's
// bit set (QueryEventSQLMode).
type SQLMode uint64

const (
	sqlModeANSIQuotes         SQLMode = 1 << 2  // MODE_ANSI_QUOTES
	sqlModeNoBackslashEscapes SQLMode = 1 << 20 // MODE_NO_BACKSLASH_ESCAPES (1<<21 is STRICT_TRANS_TABLES)
)

// ANSIQuotes: "x" is an identifier.
func (m SQLMode) ANSIQuotes() bool { return m&sqlModeANSIQuotes != 0 }

// NoBackslashEscapes: a backslash in a string is a plain character.
func (m SQLMode) NoBackslashEscapes() bool { return m&sqlModeNoBackslashEscapes != 0 }

// QueryEventSQLMode reads the sql_mode from a QUERY event's status
// variables (go-mysql's QueryEvent.StatusVars). It walks the variables in
// order and stops at the first it does not know; the server writes sql_mode
// second, after the flags, so false means the event has none.
func QueryEventSQLMode(statusVars []byte) (SQLMode, bool) {
	b := statusVars
	for len(b) > 0 {
		code := b[0]
		b = b[1:]
		n := -1
		switch code {
		case 0: // Q_FLAGS2_CODE
			n = 4
		case 1: // Q_SQL_MODE_CODE
			if len(b) < 8 {
				return 0, false
			}
			var m uint64
			for i := 7; i >= 0; i-- {
				m = m<<8 | uint64(b[i])
			}
			return SQLMode(m), true
		case 2: // Q_CATALOG_CODE: length, name, NUL
			if len(b) > 0 {
				n = 1 + int(b[0]) + 1
			}
		case 3: // Q_AUTO_INCREMENT
			n = 4
		case 4: // Q_CHARSET_CODE
			n = 6
		case 5, 6: // Q_TIME_ZONE_CODE, Q_CATALOG_NZ_CODE: length, text
			if len(b) > 0 {
				n = 1 + int(b[0])
			}
		case 7, 8: // Q_LC_TIME_NAMES_CODE, Q_CHARSET_DATABASE_CODE
			n = 2
		case 9: // Q_TABLE_MAP_FOR_UPDATE_CODE
			n = 8
		}
		if n < 0 || n > len(b) {
			return 0, false
		}
		b = b[n:]
	}
	return 0, false
}
