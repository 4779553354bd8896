package silver_test

import (
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
)

// A re-snapshot (`tidemark resnapshot`): silver stays at its state from
// before the request while the snapshot runs, then one commit replaces it
// with what bronze holds after the request's marker. Keys that the new
// snapshot does not contain (deleted while the slot was gone) vanish,
// chunks written after the stream changes of their window are folded by
// position, and a silver table built later starts at the marker too.
func TestResnapshotGatesThenReplaces(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	m := e.merger(silver.Options{})
	e.tx(ordersID, s, snapDone, "r 1 a A", "r 2 b B", "r 3 c C", "r 4 d D")
	e.tx(ordersID, s, nil, "u 1 a2 ~")
	if res := e.merge(m, ordersID); !res.Published {
		t.Fatalf("first build: %+v", res)
	}
	before := []string{"id=1 v=a2 big=A", "id=2 v=b big=B", "id=3 v=c big=C", "id=4 v=d big=D"}
	equalLines(t, "before the request", e.rows(silverIdent(ordersID), "id", "v", "big"), before)

	// The request, while the pipeline is stopped; the next run's writer
	// starts from what the lake holds.
	const id = "20261130T000000Z-abcdef"
	if _, err := bronze.RequestSnapshot(e.ctx, e.cat, e.source, ordersID, id); err != nil {
		t.Fatal(err)
	}
	e.w.Close()
	var err error
	if e.w, err = bronze.NewWriter(e.ctx, e.cat, e.source, "slot", e.log); err != nil {
		t.Fatal(err)
	}
	e.open(ordersID, s)
	// Keys 2 and 4 were deleted in the gap: nothing in bronze says so.
	// The first chunk's window holds an update of key 1 (TOAST unchanged)
	// and a delete of key 3, written before the chunk's rows, which sit
	// at the lower position of the low watermark.
	e.write(ordersID, s, 2200, nil, "u 1 a3 ~", "d 3 - -")
	e.flushAt(2200)
	e.write(ordersID, s, 2100, map[string]string{pipeline.PropSnapshot: `{"status":"running","rows":2,"request":"` + id + `"}`},
		"r 1 a2 BIG", "r 3 c C")
	e.flushAt(2200)
	res := e.merge(m, ordersID)
	if !res.Gated || !strings.Contains(res.Reason, "re-snapshot "+id) || res.Commits != 0 {
		t.Errorf("re-snapshot running: %+v, want gated naming the request", res)
	}
	st, err := silver.State(e.ctx, e.cat, e.source, "public", "orders")
	if err != nil || !st.Gated || !st.Published || !strings.Contains(st.Reason, "re-snapshot") {
		t.Errorf("State during the re-snapshot = %+v, %v; want published and gated", st, err)
	}
	equalLines(t, "during the re-snapshot", e.rows(silverIdent(ordersID), "id", "v", "big"), before)

	e.write(ordersID, s, 2300, map[string]string{pipeline.PropSnapshot: `{"status":"done","rows":3,"request":"` + id + `"}`},
		"r 5 e E")
	e.flushAt(2300)
	e.lsn = 2300
	e.tx(ordersID, s, nil, "u 5 e2 ~")
	res = e.merge(m, ordersID)
	if res.Gated || res.Commits == 0 {
		t.Fatalf("re-snapshot done: %+v, want merged", res)
	}
	after := []string{"id=1 v=a3 big=BIG", "id=5 v=e2 big=E"}
	equalLines(t, "after the re-snapshot", e.rows(silverIdent(ordersID), "id", "v", "big"), after)
	if got := e.summary(silverIdent(ordersID))[silver.PropResnapshot]; got != id {
		t.Errorf("silver's %s = %q, want %q", silver.PropResnapshot, got, id)
	}
	if res := e.merge(m, ordersID); res.Gated || res.Commits != 0 {
		t.Errorf("merging again: %+v, want nothing to do", res)
	}
	e.tx(ordersID, s, nil, "c 6 f F")
	e.merge(m, ordersID)
	after = append(after, "id=6 v=f big=F")
	equalLines(t, "a change after the re-snapshot", e.rows(silverIdent(ordersID), "id", "v", "big"), after)

	// Removed (moved aside) and rebuilt: the build starts at the marker,
	// not at bronze's first snapshot (which still holds keys 2 and 4).
	if _, err := e.cat.RenameTable(e.ctx, silverIdent(ordersID), []string{"trash", "orders"}); err != nil {
		t.Fatal(err)
	}
	if res := e.merge(m, ordersID); !res.Published {
		t.Fatalf("rebuild: %+v", res)
	}
	equalLines(t, "rebuilt", e.rows(silverIdent(ordersID), "id", "v", "big"), after)
}
