package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"
)

// LoadColumns reads a table's columns from information_schema.COLUMNS, in
// ORDINAL_POSITION order (the order of the binlog's row images), each
// parsed with ParseColumnType, and the table's key: the primary key's
// columns in key order, or, for a table without one, those of its first
// unique index (by name) whose columns are all NOT NULL, as Debezium's
// message.key.columns default does not but a replica needs; nil when the
// table has neither (the capture decides what a keyless table means). A
// table that does not exist returns no columns and no error. Safe to call
// concurrently; it runs three queries on db outside any transaction, so a
// caller that needs them consistent with a snapshot runs it in one.
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

// ElementsFromTableMap replaces the Elements of the enum and set columns
// of cols (a table's columns in ordinal order) with the members a binlog
// table map event carries under binlog_row_metadata=FULL, which are exact
// where information_schema's are not (MariaDB's is utf8mb3: a member with
// an emoji reads there as '?'). Columns the event has no members for keep
// theirs.
func ElementsFromTableMap(cols []Column, tme *replication.TableMapEvent) error {
	for _, members := range []map[int][]string{tme.EnumStrValueMap(), tme.SetStrValueMap()} {
		for i, els := range members {
			if i < 0 || i >= len(cols) {
				continue
			}
			c := &cols[i]
			if c.DataType != "enum" && c.DataType != "set" {
				return fmt.Errorf("column %s: the table map event has members for a %s column: the schema is out of step", c.ID(), c.DataType)
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
