package app_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/testenv"
)

// fieldID returns the Iceberg field id of a lake table's column (0 if the
// table or the column does not exist).
func (m *matrixLake) fieldID(ident []string, col string) int {
	tbl, err := m.lk.cat.LoadTable(context.Background(), ident)
	if err != nil {
		return 0
	}
	f, ok := tbl.Schema().FindFieldByName(col)
	if !ok {
		return 0
	}
	return f.ID
}

// property returns a table property of a lake table ("" if none).
func (m *matrixLake) property(ident []string, key string) string {
	tbl, err := m.lk.cat.LoadTable(context.Background(), ident)
	if err != nil {
		return ""
	}
	return tbl.Properties()[key]
}

// TestDDLDropColumnDrop: DROP COLUMN with silver.drop_column: drop, under the
// matrix workload: a column dropped while tidemark runs, one dropped while it
// is stopped (killed), and one dropped and later added again under the same
// name with a default. Afterwards silver has no dropped column (PyIceberg
// reads the source's columns, row for row), the column added again is a new
// field in silver and bronze (its default in the rows not written since, as
// at the source, never their old value, in silver and in the bronze
// replay), `tidemark verify` is equal, and bronze still has every dropped
// column, listed in tidemark.dropped-columns.
func TestDDLDropColumnDrop(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "ddl_drop")
	source := sourceName(t, srcURL)
	for _, table := range []string{"drop_live", "drop_stopped", "drop_readd"} {
		matrixTable(t, pg, srcURL, table, "gone text, kept int", "'gone' || g, g")
	}
	tables := []string{"drop_live", "drop_stopped", "drop_readd"}

	r, wh := newRunner(t, bin, srcURL, "--silver-drop-column", "drop", "--silver-every", "500ms")
	m := &matrixLake{t: t, lk: openLake(t, wh, source), source: source}
	s := r.Start()
	w := startMatrixWorkload(srcURL, tables)
	defer w.cancel()
	m.lk.waitCaughtUp(s, walLSN(t, srcURL), 2*time.Minute, tables...)
	waitSilver(t, s, m, tables)
	oldID, oldBronzeID := m.fieldID(m.silver("drop_readd"), "gone"), m.fieldID(m.bronze("drop_readd"), "gone")
	if oldID == 0 {
		t.Fatal("silver drop_readd has no column gone before the DROP")
	}

	// While running: dropped, then (drop_readd) added again once silver
	// has deleted it.
	pg.Exec(t, srcURL, `ALTER TABLE drop_live DROP COLUMN gone`)
	pg.Exec(t, srcURL, `ALTER TABLE drop_readd DROP COLUMN gone`)
	pg.Exec(t, srcURL, `UPDATE drop_live SET kept = -kept WHERE id % 7 = 0; UPDATE drop_readd SET kept = -kept WHERE id % 7 = 0`)
	waitFor(t, s, time.Minute, "silver to delete the dropped columns", func() bool {
		return m.column(m.silver("drop_live"), "gone") == "" && m.column(m.silver("drop_readd"), "gone") == ""
	})
	pg.Exec(t, srcURL, `ALTER TABLE drop_readd ADD COLUMN gone text DEFAULT 'dflt'`)
	pg.Exec(t, srcURL, `UPDATE drop_readd SET gone = 'new' || id WHERE id % 5 = 0`)
	waitFor(t, s, time.Minute, "silver to add column gone of drop_readd again", func() bool {
		return m.column(m.silver("drop_readd"), "gone") != ""
	})
	s.Kill(t)

	// While stopped.
	time.Sleep(200 * time.Millisecond)
	pg.Exec(t, srcURL, `ALTER TABLE drop_stopped DROP COLUMN gone`)
	pg.Exec(t, srcURL, `UPDATE drop_stopped SET kept = -kept WHERE id % 7 = 0`)
	time.Sleep(200 * time.Millisecond)
	s = r.Start()
	waitFor(t, s, time.Minute, "silver to delete the column dropped while stopped", func() bool {
		return m.column(m.silver("drop_stopped"), "gone") == ""
	})
	time.Sleep(time.Second)
	w.stop(t)
	m.lk.waitCaughtUp(s, walLSN(t, srcURL), time.Minute, tables...)
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	// checkSilver's one-shot merge runs in keep mode: it must not add the
	// dropped columns back either. Its verify runs beside drop mode.
	checkSilver(t, r, srcURL, wh, source, tables)
	// drop_readd's rows not written since the ADD COLUMN read its default
	// (from silver, and from the bronze replay), never their old value.
	checkMatrix(t, srcURL, wh, m, tables)
	if os.Getenv("TIDEMARK_PYTHON") != "" {
		for _, table := range []string{"drop_live", "drop_stopped"} {
			for id, row := range pyText(t, wh, strings.Join(m.silver(table), ".")) {
				if _, ok := row["gone"]; ok {
					t.Errorf("PyIceberg reads column gone in silver %s (row %s) after DROP COLUMN gone with drop_column: drop", table, id)
					break
				}
			}
		}
	}
	for _, table := range tables {
		if typ := m.column(m.bronze(table), "gone"); typ == "" {
			t.Errorf("bronze %s lost column gone: bronze keeps a dropped column", table)
		}
	}
	if id := m.fieldID(m.bronze("drop_readd"), "gone"); id == oldBronzeID {
		t.Errorf("bronze drop_readd: column gone added again is the dropped field %d: want a new field", id)
	}
	for _, table := range []string{"drop_live", "drop_stopped"} {
		if typ := m.column(m.silver(table), "gone"); typ != "" {
			t.Errorf("silver %s has column gone (%s) after DROP COLUMN gone with drop_column: drop", table, typ)
		}
		dropped, err := bronze.DroppedColumns(map[string]string{bronze.PropDroppedColumns: m.property(m.bronze(table), bronze.PropDroppedColumns)})
		if err != nil || !slices.Contains(dropped, "gone") {
			t.Errorf("bronze %s: %s = %v (%v), want it to list gone", table, bronze.PropDroppedColumns, dropped, err)
		}
	}
	if dropped := m.property(m.bronze("drop_readd"), bronze.PropDroppedColumns); strings.Contains(dropped, "gone") {
		t.Errorf("bronze drop_readd: %s = %s still lists gone after ADD COLUMN gone", bronze.PropDroppedColumns, dropped)
	}
	if id := m.fieldID(m.silver("drop_readd"), "gone"); id == 0 || id == oldID {
		t.Errorf("silver drop_readd: column gone added again has field id %d, the dropped one had %d: want a new field", id, oldID)
	}
}
