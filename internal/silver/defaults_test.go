package silver_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/failpoint"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/silver"
)

// A column added at the source with a constant default: the silver rows
// (and the bronze rows not merged yet) that predate it read the default, in
// steps of at most MaxChanges rows that resume after a crash; rows the
// source sent with the column keep their value.
func TestMergeGivesOlderRowsTheDefault(t *testing.T) {
	for _, mode := range []string{lake.MergeOnRead, lake.CopyOnWrite} {
		t.Run(mode, func(t *testing.T) { testMergeGivesOlderRowsTheDefault(t, mode) })
	}
}

func testMergeGivesOlderRowsTheDefault(t *testing.T, mode string) {
	e := newLakeEnv(t)
	old := ordersSchema()
	e.open(ordersID, old)
	var snap []string
	for i := 1; i <= 30; i++ {
		snap = append(snap, fmt.Sprintf("r %d a -", i))
	}
	e.tx(ordersID, old, snapDone, snap...)
	m := e.merger(silver.Options{MaxChanges: 7, DeleteMode: mode})
	e.merge(m, ordersID)
	// In bronze, not yet in silver, before the column.
	e.tx(ordersID, old, nil, "u 4 g -")

	// ALTER TABLE orders ADD COLUMN late text DEFAULT 'x': the capture
	// opens the table with the new column and its missing value.
	s2 := &change.Schema{Key: old.Key, Fields: append(slices.Clone(old.Fields),
		change.Field{Name: "late", Type: iceberg.PrimitiveTypes.String, SourceType: "text", Missing: "x", MissingText: "x"})}
	e.open(ordersID, s2)
	// A change decoded under the old layout after the add (the stream
	// replaying from before the ALTER): written with the default.
	e.tx(ordersID, old, nil, "u 2 c -")
	// Changes the source sent with the column keep what it sent.
	e.tx(ordersID, s2, nil, "u 3 d - y", "c 40 e - -", "d 5")

	crashAt := map[string]string{lake.MergeOnRead: "2*error", lake.CopyOnWrite: "1*error"}[mode]
	if err := failpoint.Enable("silver-after-fill-step=" + crashAt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { failpoint.Enable("") })
	if _, err := m.MergeTable(e.ctx, e.source, ordersID.Schema, ordersID.Name); err == nil {
		t.Fatal("merge: no error from the failpoint after the second fill step")
	}
	failpoint.Enable("")
	s, err := e.cat.LoadTable(e.ctx, silverIdent(ordersID))
	if err != nil {
		t.Fatal(err)
	}
	if p := silver.FillPending(s); len(p) != 1 || p[0] != "late" {
		t.Errorf("after a crash inside the fill: %s = %v, want [late]", silver.PropFillPending, p)
	}
	if st, err := silver.State(e.ctx, e.cat, e.source, ordersID.Schema, ordersID.Name); err != nil || !slices.Equal(st.Filling, []string{"late"}) {
		t.Errorf("silver.State while filling: %+v, %v; want Filling [late]", st, err)
	}
	half := 0
	for _, l := range e.rows(silverIdent(ordersID), "id", "late") {
		if strings.HasSuffix(l, "late=x") {
			half++
		}
	}
	if mode == lake.MergeOnRead && (half == 0 || half >= 29) {
		t.Errorf("after two fill steps of at most 7 rows: %d rows read the default", half)
	}

	failpoint.Enable("silver-after-fill-step=1000*error") // only counts the steps
	e.merge(m, ordersID)
	// Copy-on-write fills in one step.
	if n, least := failpoint.Hits("silver-after-fill-step"), map[string]int64{lake.MergeOnRead: 3, lake.CopyOnWrite: 0}[mode]; n < least {
		t.Errorf("the fill took %d more steps, want at least %d (29 rows, 7 per step, some filled before)", n, least)
	}
	failpoint.Enable("")
	var want []string
	for i := 1; i <= 30; i++ {
		switch i {
		case 2:
			want = append(want, "id=2 v=c late=x")
		case 3:
			want = append(want, "id=3 v=d late=y")
		case 4:
			want = append(want, "id=4 v=g late=x")
		case 5:
		default:
			want = append(want, fmt.Sprintf("id=%d v=a late=x", i))
		}
	}
	want = append(want, "id=40 v=e late=-")
	slices.Sort(want)
	equalLines(t, "silver", e.rows(silverIdent(ordersID), "id", "v", "late"), want)
	s, err = e.cat.LoadTable(e.ctx, silverIdent(ordersID))
	if err != nil {
		t.Fatal(err)
	}
	if p := silver.FillPending(s); len(p) != 0 {
		t.Errorf("after the fill: %s = %v, want none", silver.PropFillPending, p)
	}
	b, err := e.cat.LoadTable(e.ctx, bronze.Ident(e.source, ordersID))
	if err != nil {
		t.Fatal(err)
	}
	defs, err := bronze.Defaults(b.Properties())
	if err != nil || string(defs["late"].Value) != `"x"` {
		t.Errorf("bronze %s: %v, %v", bronze.PropDefaults, defs, err)
	}

	// After the first row with the column, a row without it follows a
	// DROP COLUMN: NULL, as for any dropped column.
	e.tx(ordersID, old, nil, "u 6 h -")
	e.merge(m, ordersID)
	if got := e.rows(silverIdent(ordersID), "id", "late"); !slices.Contains(got, "id=6 late=-") {
		t.Errorf("a row written without the column after rows with it: %v, want id=6 late=-", got)
	}
}
