package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/source/mysql"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestOldTemporalFormat: time, datetime and timestamp columns in MariaDB
// 5.3's format (tables from before MariaDB 10.1, never rebuilt) are found
// by LoadColumns; go-mysql reads their negative times as large positive
// ones, which the mapping undoes, and cannot read their fractional seconds,
// which the mapping refuses with the fix.
func TestOldTemporalFormat(t *testing.T) {
	m := testenv.StartMariaDB(t, testenv.MariaDBSetting("mysql56_temporal_format", "OFF"))
	db := m.CreateDB(t, "oldtime")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := openDB(t, m.RootDSN(db), nil)
	mustExec(ctx, t, root, "CREATE TABLE old (id int PRIMARY KEY, t time, d datetime, ts timestamp NULL)")
	mustExec(ctx, t, root, "CREATE TABLE old_frac (id int PRIMARY KEY, d6 datetime(6))")
	file, pos := masterStatus(ctx, t, root)
	mustExec(ctx, t, root, `INSERT INTO old VALUES
		(1, '-838:59:59', '1000-01-01 00:00:00', '1970-01-01 00:00:01'),
		(2, '838:59:59', '9999-12-31 23:59:59', '2038-01-19 03:14:07'),
		(3, '-00:00:01', '2024-02-29 12:00:00', '2024-02-29 12:00:00'),
		(4, '-12:34:56', NULL, NULL),
		(5, '00:00:00', NULL, NULL)`)

	reader := openDB(t, m.DSN(m.User, m.Password, db), mysql.SessionVariables())
	cols, _, err := mysql.LoadColumns(ctx, reader, db, "old")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cols[1:] {
		if !c.OldTemporal {
			t.Errorf("column %s: OldTemporal not set", c.Name)
		}
	}
	frac, _, err := mysql.LoadColumns(ctx, reader, db, "old_frac")
	if err != nil {
		t.Fatal(err)
	}
	_, err = mysql.Map(frac[1])
	if !errors.Is(err, mysql.ErrUnsupportedType) || !strings.Contains(err.Error(), "mariadb-5.3") || !strings.Contains(err.Error(), "ALTER TABLE … FORCE") {
		t.Errorf("Map(old datetime(6)): %v, want an unsupported type error naming the fix", err)
	}

	binlog, tme := readBinlogRows(ctx, t, m, file, pos, db, "old", 5)
	fromMap := make([]mysql.Column, len(cols))
	copy(fromMap, cols)
	for i := range fromMap {
		fromMap[i].OldTemporal = false
	}
	if err := mysql.ApplyTableMap(fromMap, tme); err != nil {
		t.Fatal(err)
	}
	for i, c := range fromMap[1:] {
		if !c.OldTemporal {
			t.Errorf("column %s: ApplyTableMap did not set OldTemporal", cols[i+1].Name)
		}
	}
	var exprs []string
	var maps []*mysql.Mapping
	for _, c := range fromMap {
		mp, err := mysql.Map(c)
		if err != nil {
			t.Fatal(err)
		}
		maps, exprs = append(maps, mp), append(exprs, mp.SelectExpr())
	}
	text := selectRaw(ctx, t, reader, "SELECT "+strings.Join(exprs, ", ")+" FROM old ORDER BY id")
	for r := range text {
		for i, mp := range maps {
			tv, terr := mp.DecodeText(text[r][i])
			bv, berr := mp.DecodeBinlog(binlog[r][i])
			if terr != nil || berr != nil || !sameValue(tv, bv) {
				t.Errorf("row %d %s: SELECT %q -> %v (%v), binlog %#v -> %v (%v)", r+1, cols[i].Name, text[r][i], tv, terr, binlog[r][i], bv, berr)
			}
		}
	}

	// Rebuilt in the current format, the fractional column maps.
	mustExec(ctx, t, root, "SET GLOBAL mysql56_temporal_format = ON")
	mustExec(ctx, t, root, "ALTER TABLE old_frac FORCE")
	frac, _, err = mysql.LoadColumns(ctx, reader, db, "old_frac")
	if err != nil {
		t.Fatal(err)
	}
	if frac[1].OldTemporal {
		t.Errorf("old_frac.d6 is still in the old format after ALTER TABLE … FORCE")
	}
	if _, err := mysql.Map(frac[1]); err != nil {
		t.Errorf("Map after the rebuild: %v", err)
	}
}
