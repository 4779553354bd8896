package mysql_test

import (
	"context"
	"database/sql"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/source/mysql"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestLoadColumns reads columns and keys from a real MariaDB's
// information_schema.
func TestLoadColumns(t *testing.T) {
	m := testenv.StartMariaDB(t)
	db := m.CreateDB(t, "load")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := openDB(t, m.RootDSN(db), nil)
	for _, q := range []string{
		"CREATE TABLE t_pk (b int, a int, c varchar(5) CHARACTER SET latin1 DEFAULT 'x', PRIMARY KEY (b, a))",
		"CREATE TABLE t_uk (a int NULL, b int NOT NULL, c int NOT NULL, e enum('p','q') NOT NULL, " +
			"g int AS (b + c) VIRTUAL, s int AS (b * c) STORED, UNIQUE KEY z_idx (a), UNIQUE KEY y_idx (c, b))",
		"CREATE TABLE t_nullable_uk (a int, UNIQUE KEY (a))",
		"CREATE TABLE t_none (a int)",
	} {
		mustExec(ctx, t, root, q)
	}
	reader := openDB(t, m.DSN(m.User, m.Password, db), mysql.SessionVariables())
	for _, tc := range []struct {
		db   *sql.DB
		want string
	}{{reader, ""}, {root, "time_zone"}} {
		conn, err := tc.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tc.db == root {
			mustExec(ctx, t, conn, "SET time_zone = '+01:00'")
		}
		err = mysql.CheckSession(ctx, conn)
		conn.Close()
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckSession: %v, want an error about %q", err, tc.want)
		}
	}

	for _, tc := range []struct {
		table string
		key   []string
		names []string
	}{
		{"t_pk", []string{"b", "a"}, []string{"b", "a", "c"}},
		{"t_uk", []string{"c", "b"}, []string{"a", "b", "c", "e", "g", "s"}},
		{"t_nullable_uk", nil, []string{"a"}},
		{"t_none", nil, []string{"a"}},
		{"no_such_table", nil, nil},
	} {
		cols, key, err := mysql.LoadColumns(ctx, reader, db, tc.table)
		if err != nil {
			t.Errorf("%s: %v", tc.table, err)
			continue
		}
		var names []string
		for i, c := range cols {
			names = append(names, c.Name)
			if c.Ordinal != i+1 || c.Schema != db || c.Table != tc.table {
				t.Errorf("%s.%s: ordinal %d, schema %q, table %q", tc.table, c.Name, c.Ordinal, c.Schema, c.Table)
			}
		}
		if !reflect.DeepEqual(key, tc.key) || !reflect.DeepEqual(names, tc.names) {
			t.Errorf("%s: columns %v key %v, want %v key %v", tc.table, names, key, tc.names, tc.key)
		}
		byName := map[string]mysql.Column{}
		for _, c := range cols {
			byName[c.Name] = c
		}
		switch tc.table {
		case "t_pk":
			c := byName["c"]
			if c.Charset != "latin1" || c.MaxLength != 5 || c.Default == nil || *c.Default != "'x'" || !c.Nullable {
				t.Errorf("t_pk.c: %+v", c)
			}
			if byName["a"].Nullable {
				t.Errorf("t_pk.a: a key column is nullable")
			}
		case "t_uk":
			if e := byName["e"]; !reflect.DeepEqual(e.Elements, []string{"p", "q"}) || e.DataType != "enum" {
				t.Errorf("t_uk.e: %+v", e)
			}
			if g, s := byName["g"], byName["s"]; g.Generated != "VIRTUAL" || s.Generated != "STORED" {
				t.Errorf("t_uk: generated %q and %q, want VIRTUAL and STORED", g.Generated, s.Generated)
			}
			if byName["a"].Default != nil {
				t.Errorf("t_uk.a: default %q, want none", *byName["a"].Default)
			}
		}
	}
}
