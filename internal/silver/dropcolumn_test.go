package silver_test

import (
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/silver"
)

// TestDropColumnsDeletesFromSilver: with Options.DropColumns a column the
// source dropped is deleted from silver (bronze keeps it), a keep-mode merge
// does not add it back, and a column added again under its name is a new
// field, null in the rows not written since; so is one dropped and added
// again between two merges (a new source column id).
func TestDropColumnsDeletesFromSilver(t *testing.T) {
	e := newLakeEnv(t)
	field := func(name string, id int) change.Field {
		return change.Field{Name: name, ID: id, Type: iceberg.PrimitiveTypes.String, SourceType: "text"}
	}
	key := change.Field{Name: "id", ID: 1, Type: iceberg.PrimitiveTypes.Int32, SourceType: "integer"}
	schema := func(fs ...change.Field) *change.Schema {
		return &change.Schema{Key: []string{"id"}, Fields: append([]change.Field{key}, fs...)}
	}
	fieldID := func(ident []string, col string) int {
		t.Helper()
		tbl, err := e.cat.LoadTable(e.ctx, ident)
		if err != nil {
			t.Fatal(err)
		}
		f, ok := tbl.Schema().FindFieldByName(col)
		if !ok {
			return 0
		}
		return f.ID
	}
	sIdent, bIdent := silverIdent(ordersID), bronze.Ident("src", ordersID)
	drop := e.merger(silver.Options{DropColumns: true})
	keep := e.merger(silver.Options{})

	s := schema(field("v", 2), field("big", 3))
	e.open(ordersID, s)
	e.tx(ordersID, s, snapDone, "r 1 a A", "r 2 b B")
	e.merge(drop, ordersID)
	first := fieldID(sIdent, "big")

	// DROP COLUMN big.
	s = schema(field("v", 2))
	e.open(ordersID, s)
	e.tx(ordersID, s, nil, "c 3 c")
	e.merge(drop, ordersID)
	if id := fieldID(sIdent, "big"); id != 0 {
		t.Fatalf("silver still has big (field %d) after the drop", id)
	}
	if fieldID(bIdent, "big") == 0 {
		t.Fatal("bronze lost big: bronze keeps a dropped column")
	}
	equalLines(t, "column dropped", e.rows(sIdent, "id", "v"), []string{"id=1 v=a", "id=2 v=b", "id=3 v=c"})
	e.tx(ordersID, s, nil, "u 1 a2")
	e.merge(keep, ordersID)
	if id := fieldID(sIdent, "big"); id != 0 {
		t.Fatalf("a keep-mode merge added the dropped column big back (field %d)", id)
	}

	// ADD COLUMN big: a new column (attnum 4).
	s = schema(field("v", 2), field("big", 4))
	e.open(ordersID, s)
	e.tx(ordersID, s, nil, "u 2 b2 B2")
	e.merge(drop, ordersID)
	second := fieldID(sIdent, "big")
	if second == 0 || second == first {
		t.Fatalf("big added again has field id %d (the dropped one had %d): want a new field", second, first)
	}
	equalLines(t, "column added again", e.rows(sIdent, "id", "v", "big"), []string{"id=1 v=a2 big=-", "id=2 v=b2 big=B2", "id=3 v=c big=-"})

	// DROP COLUMN big, ADD COLUMN big between two merges (attnum 5): bronze
	// too makes it a new column.
	bronzeBig := fieldID(bIdent, "big")
	s = schema(field("v", 2), field("big", 5))
	e.open(ordersID, s)
	if id := fieldID(bIdent, "big"); id == 0 || id == bronzeBig {
		t.Fatalf("bronze big added again under a new attnum has field id %d (was %d): want a new field", id, bronzeBig)
	}
	e.tx(ordersID, s, nil, "u 3 c2 C2")
	e.merge(drop, ordersID)
	third := fieldID(sIdent, "big")
	if third == 0 || third == second {
		t.Fatalf("big dropped and added again between merges has field id %d (was %d): want a new field", third, second)
	}
	equalLines(t, "column dropped and added again between merges", e.rows(sIdent, "id", "v", "big"),
		[]string{"id=1 v=a2 big=-", "id=2 v=b2 big=-", "id=3 v=c2 big=C2"})
	equalLines(t, "bronze after the column was added again", e.rows(bIdent, "id", "big"),
		[]string{"id=1 big=-", "id=1 big=-", "id=2 big=-", "id=2 big=-", "id=3 big=-", "id=3 big=C2"})

	// The same in keep mode: a column added again is a new column there too.
	s = schema(field("v", 2), field("big", 6))
	e.open(ordersID, s)
	e.tx(ordersID, s, nil, "u 1 a3 A3")
	e.merge(keep, ordersID)
	if id := fieldID(sIdent, "big"); id == 0 || id == third {
		t.Fatalf("keep mode: big dropped and added again has field id %d (was %d): want a new field", id, third)
	}
	equalLines(t, "keep mode: column dropped and added again", e.rows(sIdent, "id", "v", "big"),
		[]string{"id=1 v=a3 big=A3", "id=2 v=b2 big=-", "id=3 v=c2 big=-"})
}

// TestDropColumnsBuildsWithout: a silver table built (first merge, or a
// rebuild) after the source dropped a column has no such column with
// DropColumns, and has it (NULL in rows changed since) without.
func TestDropColumnsBuildsWithout(t *testing.T) {
	for _, drop := range []bool{true, false} {
		e := newLakeEnv(t)
		s := ordersSchema()
		e.open(ordersID, s)
		e.tx(ordersID, s, snapDone, "r 1 a A", "r 2 b B")
		s2 := &change.Schema{Key: s.Key, Fields: s.Fields[:2]}
		e.open(ordersID, s2)
		e.tx(ordersID, s2, nil, "u 1 a2", "c 3 c")
		e.merge(e.merger(silver.Options{DropColumns: drop}), ordersID)
		tbl, err := e.cat.LoadTable(e.ctx, silverIdent(ordersID))
		if err != nil {
			t.Fatal(err)
		}
		_, has := tbl.Schema().FindFieldByName("big")
		if has == drop {
			t.Fatalf("DropColumns %v: silver built after DROP COLUMN big has big: %v", drop, has)
		}
		if drop {
			equalLines(t, "built without big", e.rows(silverIdent(ordersID), "id", "v"), []string{"id=1 v=a2", "id=2 v=b", "id=3 v=c"})
		} else {
			equalLines(t, "built with big", e.rows(silverIdent(ordersID), "id", "v", "big"), []string{"id=1 v=a2 big=-", "id=2 v=b big=B", "id=3 v=c big=-"})
		}
	}
}
