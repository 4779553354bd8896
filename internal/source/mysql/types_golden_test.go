package mysql_test

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	driver "github.com/go-sql-driver/mysql"

	"github.com/tidemark/tidemark/internal/coltype"
	"github.com/tidemark/tidemark/internal/source/mysql"
	"github.com/tidemark/tidemark/internal/source/mysql/mysqltest"
	"github.com/tidemark/tidemark/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/mysql_types.golden from the server's output")

// goldenRowCount is the number of rows mysqltest.Rows and DeadLetterRows insert.
const goldenRowCount = 22

// TestGolden writes a row of every type to a real MariaDB, reads it back
// both ways tidemark does (a snapshot SELECT of SelectExpr under
// SessionVariables, and the binlog through go-mysql's BinlogSyncer),
// checks that both decode to the same lake value, or to the same dead
// letter, and compares a rendering with testdata/mysql_types.golden.
func TestGolden(t *testing.T) {
	m := testenv.StartMariaDB(t)
	dbName := m.CreateDB(t, "types")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	root := openDB(t, m.RootDSN(dbName), nil)
	mustExec(ctx, t, root, mysqltest.DDL)
	file, pos := masterStatus(ctx, t, root)

	conn, err := root.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range append(slices.Clip(mysqltest.Rows), mysqltest.DeadLetterRows...) {
		mustExec(ctx, t, conn, q)
	}
	conn.Close()

	cols, key, err := mysql.LoadColumns(ctx, root, dbName, "golden")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(key, []string{"id"}) {
		t.Errorf("key %v, want [id]", key)
	}
	binlogRows, tme := readBinlogRows(ctx, t, m, file, pos, dbName, "golden", goldenRowCount)
	// In the order of the SELECT's: the dead-letter rows were written last.
	slices.SortFunc(binlogRows, func(a, b []any) int { return cmp.Compare(a[0].(int32), b[0].(int32)) })
	// information_schema (utf8mb3) cannot spell the 🌊 member; the table
	// map event can.
	if !strings.Contains(strings.Join(elementsOf(cols, "c_enum"), ","), "?") {
		t.Errorf("information_schema spelled the enum's emoji member: %q (the workaround may be unneeded)", elementsOf(cols, "c_enum"))
	}
	if err := mysql.ApplyTableMap(cols, tme); err != nil {
		t.Fatal(err)
	}
	mappings := make([]*mysql.Mapping, len(cols))
	exprs := make([]string, len(cols))
	for i, c := range cols {
		mp, err := mysql.Map(c)
		if err != nil {
			t.Fatalf("Map(%s): %v", c.Name, err)
		}
		mappings[i], exprs[i] = mp, mp.SelectExpr()
	}
	reader := openDB(t, m.DSN(m.User, m.Password, dbName), mysql.SessionVariables())
	textRows := selectRaw(ctx, t, reader, "SELECT "+strings.Join(exprs, ", ")+" FROM golden ORDER BY id")
	if len(textRows) != len(binlogRows) {
		t.Fatalf("%d rows by SELECT, %d in the binlog", len(textRows), len(binlogRows))
	}

	var out strings.Builder
	out.WriteString("# MariaDB " + serverVersion(ctx, t, root) + ": SELECT text and binlog value => lake value (both must agree).\n")
	out.WriteString("# Regenerate: go test ./internal/source/mysql -run TestGolden -update\n")
	for i, c := range cols {
		mp := mappings[i]
		gen := ""
		if c.Generated != "" {
			gen = " " + strings.ToLower(c.Generated) + " generated"
		}
		fmt.Fprintf(&out, "\n%s  %s%s  ->  %s  (arrow %s)\n", c.Name, mp.SourceType(), gen, mp.IcebergType(), mp.ArrowType())
		// The snapshot's builder (AppendText) and the stream's values
		// (AppendValue of DecodeBinlog) must make equal arrays.
		b := array.NewBuilder(memory.DefaultAllocator, mp.ArrowType())
		bs := array.NewBuilder(memory.DefaultAllocator, mp.ArrowType())
		for r := range textRows {
			id := string(textRows[r][0])
			text, bv := textRows[r][i], binlogRows[r][i]
			key := id + " " + c.Name
			tv, terr := mp.DecodeText(text)
			bval, berr := mp.DecodeBinlog(bv)
			if text == nil && id != "2" {
				continue // NULLs are gaps; row 2 shows them
			}
			shown := "NULL"
			if text != nil {
				shown = mysqltest.Quote(text)
			}
			if terr != nil || berr != nil {
				tr, br := reason(terr), reason(berr)
				if tr != br {
					t.Errorf("row %s: SELECT decodes to %v, binlog %v", key, orValue(tv, terr, mp), orValue(bval, berr, mp))
				}
				if !mysqltest.DeadLetters[key] {
					t.Errorf("row %s: unexpected error: %v / %v", key, terr, berr)
				}
				fmt.Fprintf(&out, "  %s  %s  =>  DEAD LETTER: %s\n", id, shown, tr)
				continue
			}
			if mysqltest.DeadLetters[key] {
				t.Errorf("row %s: decoded to %s, want a dead letter", key, mysqltest.Render(tv, mp.ArrowType()))
			}
			if !sameValue(tv, bval) {
				t.Errorf("row %s: SELECT %s decodes to %s (%T), binlog %#v to %s (%T)", key, shown, mysqltest.Render(tv, mp.ArrowType()), tv, bv, mysqltest.Render(bval, mp.ArrowType()), bval)
			}
			if err := mp.AppendText(b, text); err != nil {
				t.Errorf("row %s: AppendText: %v", key, err)
			}
			if err := coltype.AppendValue(bs, bval); err != nil {
				t.Errorf("row %s: AppendValue: %v", key, err)
			}
			fmt.Fprintf(&out, "  %s  %s  =>  %s\n", id, shown, mysqltest.Render(tv, mp.ArrowType()))
		}
		snap, stream := b.NewArray(), bs.NewArray()
		if !array.Equal(snap, stream) {
			t.Errorf("column %s: AppendText built %v, the binlog's values %v", c.Name, snap, stream)
		}
		snap.Release()
		stream.Release()
		b.Release()
		bs.Release()
	}

	path := filepath.Join("testdata", "mysql_types.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got := out.String(); got != string(want) {
		t.Errorf("decoded values differ from %s (run with -update if the change is intended):\n%s", path, lineDiff(string(want), got))
	}
}

func elementsOf(cols []mysql.Column, name string) []string {
	for _, c := range cols {
		if c.Name == name {
			return c.Elements
		}
	}
	return nil
}

func openDB(t *testing.T, dsn string, vars map[string]string) *sql.DB {
	t.Helper()
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MultiStatements = false
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Collation = "utf8mb4_unicode_ci"
	for k, v := range vars {
		cfg.Params[k] = v
	}
	c, err := driver.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	t.Cleanup(func() { db.Close() })
	return db
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func mustExec(ctx context.Context, t *testing.T, db execer, q string) {
	t.Helper()
	if _, err := db.ExecContext(ctx, q); err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
}

func masterStatus(ctx context.Context, t *testing.T, db *sql.DB) (string, uint32) {
	t.Helper()
	rows, err := db.QueryContext(ctx, "SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() {
		t.Fatal("SHOW MASTER STATUS: no row (binlog off?)")
	}
	cols, _ := rows.Columns()
	vals := make([]any, len(cols))
	var file string
	var pos uint32
	vals[0], vals[1] = &file, &pos
	for i := 2; i < len(vals); i++ {
		vals[i] = new(sql.RawBytes)
	}
	if err := rows.Scan(vals...); err != nil {
		t.Fatal(err)
	}
	return file, pos
}

func serverVersion(ctx context.Context, t *testing.T, db *sql.DB) string {
	var v string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if i := strings.Index(v, "-"); i > 0 {
		v = v[:i]
	}
	if i := strings.LastIndex(v, "."); i > 0 {
		v = v[:i] // the major version: the golden must not change with a patch release
	}
	return v
}

// readBinlogRows reads the binlog from file:pos with a go-mysql
// BinlogSyncer set up as SyncerSettings says, until it has seen n
// inserted rows of db.table, and returns them with the table's last
// table map event.
func readBinlogRows(ctx context.Context, t *testing.T, m *testenv.MariaDB, file string, pos uint32, db, table string, n int) ([][]any, *replication.TableMapEvent) {
	t.Helper()
	cfg := replication.BinlogSyncerConfig{
		ServerID: 1000 + uint32(time.Now().UnixNano()%1000), Flavor: gomysql.MariaDBFlavor,
		Host: m.Host, Port: uint16(m.Port), User: m.User, Password: m.Password,
		Logger: slog.New(slog.DiscardHandler),
	}
	mysql.SyncerSettings(&cfg)
	syncer := replication.NewBinlogSyncer(cfg)
	defer syncer.Close()
	streamer, err := syncer.StartSync(gomysql.Position{Name: file, Pos: pos})
	if err != nil {
		t.Fatal(err)
	}
	var (
		rows [][]any
		tme  *replication.TableMapEvent
	)
	for len(rows) < n {
		ev, err := streamer.GetEvent(ctx)
		if err != nil {
			t.Fatalf("binlog: %v after %d of %d rows", err, len(rows), n)
		}
		re, ok := ev.Event.(*replication.RowsEvent)
		if !ok || string(re.Table.Schema) != db || string(re.Table.Table) != table {
			continue
		}
		tme = re.Table
		for i, skipped := range re.SkippedColumns {
			if len(skipped) > 0 {
				t.Errorf("row image %d leaves out columns %v (binlog_row_image=FULL)", len(rows)+i, skipped)
			}
		}
		rows = append(rows, re.Rows...)
	}
	return rows, tme
}

func selectRaw(ctx context.Context, t *testing.T, db *sql.DB, q string) [][][]byte {
	t.Helper()
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out [][][]byte
	for rows.Next() {
		raw := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range raw {
			ptrs[i] = &raw[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := make([][]byte, len(cols))
		for i, v := range raw {
			if v != nil {
				row[i] = append([]byte{}, v...)
			}
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func reason(err error) string {
	if err == nil {
		return "<nil>"
	}
	var ve *coltype.ValueError
	if errors.As(err, &ve) {
		return ve.Reason
	}
	return "not a ValueError: " + err.Error()
}

func orValue(v any, err error, mp *mysql.Mapping) string {
	if err != nil {
		return "error " + err.Error()
	}
	return mysqltest.Render(v, mp.ArrowType())
}

// sameValue compares lake values; floats by bits (so -0 differs from 0).
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float32:
		y, ok := b.(float32)
		return ok && math.Float32bits(x) == math.Float32bits(y)
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	}
	return reflect.DeepEqual(a, b)
}

func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want: %s\n  got:  %s\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}
