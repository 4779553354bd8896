package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// LoadColumns reads a table's columns from information_schema.COLUMNS, in
// ORDINAL_POSITION order (the order of the binlog's row images), each
// parsed with ParseColumnType, and the table's key: the primary key's
// columns in key order, or, for a table without one, those of its first
// unique index (by name) whose columns are all NOT NULL, as Debezium's
// message.key.columns default does not but a replica needs; nil when the
// table has neither (the capture decides what a keyless table means).
// Temporal columns in MariaDB 5.3's format are marked OldTemporal (from
// SHOW CREATE TABLE). A table that does not exist returns no columns and
// no error. Safe to call concurrently; its queries run on db outside any
// transaction.
func LoadColumns(ctx context.Context, db *sql.DB, schema, table string) ([]Column, []string, error) {
	return loadColumns(ctx, db, schema, table)
}

// querier is what LoadColumns needs of *sql.DB, *sql.Conn and *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func loadColumns(ctx context.Context, q querier, schema, table string) ([]Column, []string, error) {
	rows, err := q.QueryContext(ctx, `
		SELECT COLUMN_NAME, ORDINAL_POSITION, DATA_TYPE, COLUMN_TYPE,
		       COALESCE(NUMERIC_PRECISION, 0), COALESCE(NUMERIC_SCALE, 0),
		       COALESCE(DATETIME_PRECISION, 0), COALESCE(CHARACTER_MAXIMUM_LENGTH, 0),
		       COALESCE(CHARACTER_SET_NAME, ''), COALESCE(COLLATION_NAME, ''),
		       IS_NULLABLE, EXTRA, COLUMN_DEFAULT
		  FROM information_schema.COLUMNS
		 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?
		 ORDER BY ORDINAL_POSITION`, schema, table)
	if err != nil {
		return nil, nil, fmt.Errorf("can't read the columns of %s.%s: %w", schema, table, err)
	}
	defer rows.Close()
	var cols []Column
	for rows.Next() {
		c := Column{Schema: schema, Table: table}
		var nullable string
		var def sql.NullString
		if err := rows.Scan(&c.Name, &c.Ordinal, &c.DataType, &c.ColumnType, &c.Precision, &c.Scale,
			&c.DatetimePrecision, &c.MaxLength, &c.Charset, &c.Collation, &nullable, &c.Extra, &def); err != nil {
			return nil, nil, fmt.Errorf("can't read the columns of %s.%s: %w", schema, table, err)
		}
		c.DataType = strings.ToLower(c.DataType)
		c.Nullable = nullable == "YES"
		if def.Valid && def.String != "NULL" { // MariaDB spells "no default" NULL
			c.Default = &def.String
		}
		extra := strings.ToUpper(c.Extra)
		switch {
		case strings.Contains(extra, "VIRTUAL"):
			c.Generated = "VIRTUAL"
		case strings.Contains(extra, "STORED") || strings.Contains(extra, "PERSISTENT"):
			c.Generated = "STORED"
		}
		if err := c.ParseColumnType(); err != nil {
			return nil, nil, err
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("can't read the columns of %s.%s: %w", schema, table, err)
	}
	if len(cols) == 0 {
		return nil, nil, nil
	}
	if err := markOldTemporal(ctx, q, schema, table, cols); err != nil {
		return nil, nil, err
	}
	key, err := loadKey(ctx, q, schema, table, cols)
	if err != nil {
		return nil, nil, err
	}
	return cols, key, nil
}

// loadKey reads the primary key, or the first all-NOT NULL unique index.
func loadKey(ctx context.Context, q querier, schema, table string, cols []Column) ([]string, error) {
	rows, err := q.QueryContext(ctx, `
		SELECT INDEX_NAME, COLUMN_NAME
		  FROM information_schema.STATISTICS
		 WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0
		 ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX`, schema, table)
	if err != nil {
		return nil, fmt.Errorf("can't read the key of %s.%s: %w", schema, table, err)
	}
	defer rows.Close()
	nullable := make(map[string]bool, len(cols))
	for _, c := range cols {
		nullable[c.Name] = c.Nullable
	}
	var (
		order   []string
		indexes = map[string][]string{}
	)
	for rows.Next() {
		var index string
		var col sql.NullString // NULL for an index on an expression
		if err := rows.Scan(&index, &col); err != nil {
			return nil, fmt.Errorf("can't read the key of %s.%s: %w", schema, table, err)
		}
		if _, ok := indexes[index]; !ok {
			order = append(order, index)
		}
		if !col.Valid {
			indexes[index] = append(indexes[index], "") // never usable
			continue
		}
		indexes[index] = append(indexes[index], col.String)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("can't read the key of %s.%s: %w", schema, table, err)
	}
next:
	for _, index := range order {
		key := indexes[index]
		if index != "PRIMARY" {
			for _, k := range key {
				if n, ok := nullable[k]; k == "" || !ok || n {
					continue next
				}
			}
		}
		return key, nil
	}
	return nil, nil
}

// ApplyTableMap brings a table's columns (in ordinal order, as
// LoadColumns returns them) in line with what a binlog table map event of
// the table says (binlog_row_metadata=FULL), before they are mapped:
//
//   - the Elements of enum and set columns become the event's members,
//     which are exact where information_schema's are not (MariaDB's is
//     utf8mb3: a member with an emoji reads there as '?');
//   - a time, datetime or timestamp column the event types as MariaDB
//     5.3's temporal format (MYSQL_TYPE_TIME, _DATETIME, _TIMESTAMP rather
//     than their *2 forms) is marked OldTemporal, which Map needs to read
//     it exactly or to refuse it.
//
// It fails when the event's columns are not the table's (a schema change
// the capture has not applied yet). It does not compare signedness:
// go-mysql v1.13.0's UnsignedMap leaves YEAR out of the numeric columns,
// where MariaDB counts it (Field_year is a Field_tiny), so on MariaDB
// every numeric column after a YEAR reads the previous column's bit.
func ApplyTableMap(cols []Column, tme *replication.TableMapEvent) error {
	if int(tme.ColumnCount) != len(cols) {
		return fmt.Errorf("table %s.%s: the binlog's table map has %d columns, the table %d: the schema is out of step",
			tme.Schema, tme.Table, tme.ColumnCount, len(cols))
	}
	for i := range cols {
		c := &cols[i]
		switch tme.ColumnType[i] {
		case gomysql.MYSQL_TYPE_TIME, gomysql.MYSQL_TYPE_DATETIME, gomysql.MYSQL_TYPE_TIMESTAMP:
			switch c.DataType {
			case "time", "datetime", "timestamp":
				c.OldTemporal = true
			default:
				return fmt.Errorf("column %s: the binlog's table map has a temporal type for a %s column: the schema is out of step", c.ID(), c.DataType)
			}
		}
	}
	for _, members := range []map[int][]string{tme.EnumStrValueMap(), tme.SetStrValueMap()} {
		for i, els := range members {
			if i < 0 || i >= len(cols) {
				continue
			}
			c := &cols[i]
			if c.DataType != "enum" && c.DataType != "set" {
				return fmt.Errorf("column %s: the binlog's table map has members for a %s column: the schema is out of step", c.ID(), c.DataType)
			}
			cs, ok := charsetOf(c.Charset)
			if !ok {
				cs = csUTF8
			}
			out := make([]string, len(els))
			for j, e := range els {
				s, err := toUTF8(cs, []byte(e))
				if err != nil {
					return fmt.Errorf("column %s: member %d in the table map event: %w", c.ID(), j+1, err)
				}
				out[j] = s
			}
			c.Elements = out
		}
	}
	return nil
}

// markOldTemporal sets OldTemporal on the columns SHOW CREATE TABLE marks
// /* mariadb-5.3 */: time, datetime and timestamp columns created before
// MariaDB 10.1 (or with mysql56_temporal_format=OFF) and never rebuilt.
// information_schema does not tell.
func markOldTemporal(ctx context.Context, q querier, schema, table string, cols []Column) error {
	temporal := false
	for _, c := range cols {
		switch c.DataType {
		case "time", "datetime", "timestamp":
			temporal = true
		}
	}
	if !temporal {
		return nil
	}
	rows, err := q.QueryContext(ctx, "SHOW CREATE TABLE "+QuoteIdent(schema)+"."+QuoteIdent(table))
	if err != nil {
		return fmt.Errorf("can't read the definition of %s.%s: %w", schema, table, err)
	}
	defer rows.Close()
	var name, ddl string
	if rows.Next() {
		if err := rows.Scan(&name, &ddl); err != nil {
			return fmt.Errorf("can't read the definition of %s.%s: %w", schema, table, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("can't read the definition of %s.%s: %w", schema, table, err)
	}
	old := map[string]bool{}
	for _, line := range strings.Split(ddl, "\n") {
		line = strings.TrimSpace(line)
		if !strings.Contains(line, "/* mariadb-5.3 */") || !strings.HasPrefix(line, "`") {
			continue
		}
		var b strings.Builder
		for i := 1; i < len(line); i++ {
			if line[i] == '`' {
				if i+1 < len(line) && line[i+1] == '`' {
					b.WriteByte('`')
					i++
					continue
				}
				break
			}
			b.WriteByte(line[i])
		}
		old[b.String()] = true
	}
	for i := range cols {
		if old[cols[i].Name] {
			cols[i].OldTemporal = true
		}
	}
	return nil
}

// CheckSession verifies that a connection runs under SessionVariables
// (time zone UTC, results in utf8mb4, no PAD_CHAR_TO_FULL_LENGTH), so
// that DecodeText reads its TIMESTAMP text as the right instant and its
// text in the right encoding. conn is the connection the snapshot reads
// on: the settings are per session, and a *sql.DB may answer from any of
// its connections.
func CheckSession(ctx context.Context, conn *sql.Conn) error {
	rows, err := conn.QueryContext(ctx, "SELECT @@session.time_zone, @@session.character_set_results, @@session.sql_mode")
	if err != nil {
		return fmt.Errorf("can't read the session's settings: %w", err)
	}
	defer rows.Close()
	var tz, results, mode sql.NullString
	if rows.Next() {
		if err := rows.Scan(&tz, &results, &mode); err != nil {
			return fmt.Errorf("can't read the session's settings: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("can't read the session's settings: %w", err)
	}
	var bad []string
	if tz.String != "+00:00" && !strings.EqualFold(tz.String, "UTC") {
		bad = append(bad, fmt.Sprintf("time_zone is %q, not '+00:00'", tz.String))
	}
	if !strings.EqualFold(results.String, "utf8mb4") {
		bad = append(bad, fmt.Sprintf("character_set_results is %q, not utf8mb4", results.String))
	}
	if strings.Contains(strings.ToUpper(mode.String), "PAD_CHAR_TO_FULL_LENGTH") {
		bad = append(bad, "sql_mode has PAD_CHAR_TO_FULL_LENGTH")
	}
	if len(bad) > 0 {
		return fmt.Errorf("the connection does not run under mysql.SessionVariables: %s", strings.Join(bad, "; "))
	}
	return nil
}

// ElementsFromTableMap is ApplyTableMap, under its first name.
//
// Deprecated: use ApplyTableMap.
func ElementsFromTableMap(cols []Column, tme *replication.TableMapEvent) error {
	return ApplyTableMap(cols, tme)
}
