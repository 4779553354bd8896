package silver_test

import (
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
)

// A key change (the source's primary key went from (id) to (id, v)):
// bronze's marker requests a re-read and records the new key. Silver keeps
// the table keyed by (id), as it was, while the re-read runs, builds the
// table anew keyed by (id, v) from what bronze holds after the marker, and
// swaps it in once complete: its identifier fields are the new key, and
// its rows the re-read's and the changes after it.
func TestKeyChangeRebuildsSilver(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{})
	e.tx(ordersID, s, snapDone, "r 1 a A", "r 2 b B", "r 3 c C")
	if res := e.merge(m, ordersID); !res.Published {
		t.Fatalf("first build: %+v", res)
	}
	before := []string{"id=1 v=a big=A", "id=2 v=b big=B", "id=3 v=c big=C"}
	equalLines(t, "before the key change", e.rows(silverIdent(ordersID), "id", "v", "big"), before)

	// The marker, as the capture commits it (rekey.go), then the table
	// opened by its new key.
	const id = "20261202T000000Z-rekey-abcdef"
	const reason = "the table's primary key changed from (id) to (id, v) (seen at 0/1): silver is rebuilt on the new key"
	e.tx(ordersID, s, map[string]string{
		pipeline.PropSnapshot: pipeline.PendingSnapshot(id), pipeline.PropResnapshot: id,
		pipeline.PropResnapshotReason: reason, pipeline.PropKey: `["id","v"]`,
	})
	nk := &change.Schema{Key: []string{"id", "v"}, Fields: s.Fields}
	e.open(ordersID, nk)
	// A delete by the new key, streamed while the re-read runs, and the
	// re-read's first chunk (keys 1 and 2 now share id 1).
	e.tx(ordersID, nk, nil, "d 3 c -")
	e.write(ordersID, nk, e.lsn+100, map[string]string{pipeline.PropSnapshot: `{"status":"running","rows":2,"request":"` + id + `"}`},
		"r 1 a A", "r 1 z Z")
	e.lsn += 100
	e.flushAt(e.lsn)
	res := e.merge(m, ordersID)
	if !res.Gated || !strings.Contains(res.Reason, "primary key changed") || !strings.Contains(res.Reason, "rebuilt on its new key (id, v)") {
		t.Errorf("re-read running: %+v, want gated saying the table is rebuilt on its new key", res)
	}
	equalLines(t, "during the re-read", e.rows(silverIdent(ordersID), "id", "v", "big"), before)
	if k := identifierFields(t, e, silverIdent(ordersID)); k != "id" {
		t.Errorf("published table keyed by (%s) during the re-read, want (id)", k)
	}
	st, err := silver.State(e.ctx, e.cat, e.source, "public", "orders")
	if err != nil || !st.Published || !st.Gated || !strings.Contains(st.Reason, "primary key changed") {
		t.Errorf("State during the re-read = %+v, %v; want published and gated with the reason", st, err)
	}

	e.write(ordersID, nk, e.lsn+100, map[string]string{pipeline.PropSnapshot: `{"status":"done","rows":3,"request":"` + id + `"}`},
		"r 2 b B")
	e.lsn += 100
	e.flushAt(e.lsn)
	e.tx(ordersID, nk, nil, "u 1 z Z2")
	res = e.merge(m, ordersID)
	if res.Gated || !res.Published {
		t.Fatalf("re-read done: %+v, want the rebuilt table published", res)
	}
	after := []string{"id=1 v=a big=A", "id=1 v=z big=Z2", "id=2 v=b big=B"}
	equalLines(t, "after the rebuild", e.rows(silverIdent(ordersID), "id", "v", "big"), after)
	if k := identifierFields(t, e, silverIdent(ordersID)); k != "id, v" {
		t.Errorf("rebuilt table keyed by (%s), want (id, v)", k)
	}
	if res := e.merge(m, ordersID); res.Gated || res.Commits != 0 {
		t.Errorf("merging again: %+v, want nothing to do", res)
	}
	e.tx(ordersID, nk, nil, "d 1 a -")
	e.merge(m, ordersID)
	equalLines(t, "a delete by the new key after the rebuild", e.rows(silverIdent(ordersID), "id", "v", "big"), after[1:])
}

func identifierFields(t *testing.T, e *lakeEnv, ident []string) string {
	t.Helper()
	tbl, err := e.cat.LoadTable(e.ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	sch := tbl.Schema()
	var names []string
	for _, id := range sch.IdentifierFieldIDs {
		n, _ := sch.FindColumnName(id)
		names = append(names, n)
	}
	return strings.Join(names, ", ")
}
