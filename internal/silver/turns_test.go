package silver_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/silver"
)

var itemsID = change.TableID{Schema: "public", Name: "items"}

// syncBuffer is a log sink the merger's goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// backlog writes n bronze commits to each of tables, one insert and one
// update of a new key per table per commit.
func (e *lakeEnv) backlog(s *change.Schema, n int, tables ...change.TableID) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		e.lsn += 100
		for _, id := range tables {
			e.write(id, s, e.lsn, nil, fmt.Sprintf("c %d v%d B%d", 100+i, i, i), fmt.Sprintf("u %d w%d ~", 100+i, i))
		}
		e.flushAt(e.lsn)
	}
}

// A backlog of many small bronze commits is merged as one coalesced
// commit, and status counts it in commits and changes.
func TestBacklogOfSmallCommitsMergesAsOne(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	e.tx(ordersID, s, snapDone, "r 1 a A")
	m := e.merger(silver.Options{})
	e.merge(m, ordersID)
	e.backlog(s, 200, ordersID)
	st, err := silver.State(e.ctx, e.cat, e.source, "public", "orders")
	if err != nil || st.Behind != 200 || st.Backlog.Commits != 200 || st.Backlog.Changes != 400 {
		t.Fatalf("State = %+v, %v; want a backlog of 200 commits, 400 changes", st, err)
	}
	res := e.merge(m, ordersID)
	if res.Commits != 1 || res.BronzeCommits != 200 || res.Changes != 400 || res.Backlog.Commits != 0 {
		t.Errorf("merge of 200 small commits: %+v, want one silver commit of 200 bronze commits, 400 changes", res)
	}
	st, err = silver.State(e.ctx, e.cat, e.source, "public", "orders")
	if err != nil || st.Behind != 0 || st.Backlog.Changes != 0 {
		t.Errorf("State after = %+v, %v; want no backlog", st, err)
	}
	if got := len(e.rows(silverIdent(ordersID), "id")); got != 201 {
		t.Errorf("silver has %d rows, want 201", got)
	}
}

// Tables take turns: while two tables catch up in several steps each, the
// first table's last step comes after the second's first, so one table's
// backlog never holds back another's (issue 22). Each table is reported
// once, with its whole result, and progress is logged with the backlog.
// The same holds for a merge of every table (tidemark run, tidemark merge)
// and of named tables (tidemark merge TABLE...).
func TestTablesTakeTurnsCatchingUp(t *testing.T) {
	for _, named := range []bool{false, true} {
		t.Run(map[bool]string{false: "all", true: "named"}[named], func(t *testing.T) { testTablesTakeTurns(t, named) })
	}
}

func testTablesTakeTurns(t *testing.T, named bool) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	e.open(itemsID, s)
	e.lsn += 100
	e.write(ordersID, s, e.lsn, snapDone, "r 1 a A")
	e.write(itemsID, s, e.lsn, snapDone, "r 1 a A")
	e.flushAt(e.lsn)
	var out syncBuffer
	var reports []silver.Result
	m := silver.NewMerger(e.cat, silver.Options{MaxChanges: 4, Report: func(r silver.Result) { reports = append(reports, r) }},
		slog.New(slog.NewTextHandler(&out, nil)))
	if err := m.MergeAll(e.ctx, e.source); err != nil {
		t.Fatal(err)
	}
	e.backlog(s, 10, ordersID, itemsID) // 20 changes each: 5 steps of 4
	reports = nil
	merge := func() error { return m.MergeAll(e.ctx, e.source) }
	if named {
		merge = func() error { return m.MergeTables(e.ctx, e.source, []change.TableID{itemsID, ordersID}) }
	}
	if err := merge(); err != nil {
		t.Fatal(err)
	}
	var first, last = map[string]int{}, map[string]int{}
	lines := strings.Split(out.String(), "\n")
	steps := 0
	for i, l := range lines {
		if !strings.Contains(l, "msg=\"silver merge progress\"") && !strings.Contains(l, "msg=\"silver merged\"") {
			continue
		}
		for _, name := range []string{"orders", "items"} {
			if strings.Contains(l, "public."+name+" ") {
				if _, ok := first[name]; !ok {
					first[name] = i
				}
				last[name] = i
			}
		}
		if strings.Contains(l, "backlog_changes=") {
			steps++
		}
	}
	if first["items"] > last["orders"] || first["orders"] > last["items"] {
		t.Errorf("one table caught up before the other began (no turns):\n%s", out.String())
	}
	if steps < 6 {
		t.Errorf("%d progress lines with a backlog, want at least 4 per table:\n%s", steps, out.String())
	}
	if len(reports) != 2 {
		t.Fatalf("reports %+v, want one per table", reports)
	}
	for _, r := range reports {
		if r.BronzeCommits != 10 || r.Changes != 20 || r.Commits < 5 || r.Backlog.Commits != 0 {
			t.Errorf("report %+v, want 10 bronze commits, 20 changes in 5 commits or more, no backlog", r)
		}
	}
	for _, id := range []change.TableID{ordersID, itemsID} {
		if got := len(e.rows(silverIdent(id), "id")); got != 11 {
			t.Errorf("silver %s has %d rows, want 11", id.Name, got)
		}
	}
}

// Status tells the expected time to catch up: a merge step records the
// changes it read and when it started, and a backlog's expected time is
// its changes at the rate of the last steps. Unknown until a step has
// recorded one (the build does not), zero once caught up.
func TestExpectedTimeToCatchUp(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	e.tx(ordersID, s, snapDone, "r 1 a A")
	m := e.merger(silver.Options{MaxChanges: 8})
	e.merge(m, ordersID) // the build
	e.backlog(s, 10, ordersID)
	st, err := silver.State(e.ctx, e.cat, e.source, "public", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if eta, ok := st.Backlog.CatchUp(st.MergeRate); ok || st.Backlog.Changes != 20 {
		t.Errorf("before any merge step: backlog %+v, expected time %s (known %v); want 20 changes, unknown", st.Backlog, eta, ok)
	}
	res := e.merge(m, ordersID) // 3 steps: 8, 8, 4 changes
	if res.Commits != 3 || res.Changes != 20 {
		t.Fatalf("merge: %+v, want 3 commits of 20 changes", res)
	}
	sum := e.summary(silverIdent(ordersID))
	if sum[silver.PropStepChanges] != "4" || sum[silver.PropStepStarted] == "" {
		t.Errorf("last step's summary %v, want %s=4 and %s", sum, silver.PropStepChanges, silver.PropStepStarted)
	}
	st, err = silver.State(e.ctx, e.cat, e.source, "public", "orders")
	if err != nil {
		t.Fatal(err)
	}
	if eta, ok := st.Backlog.CatchUp(st.MergeRate); !ok || eta != 0 || st.MergeRate <= 0 {
		t.Errorf("caught up: rate %v, expected time %s (known %v); want a rate, 0", st.MergeRate, eta, ok)
	}
	e.backlog(s, 50, ordersID)
	st, err = silver.State(e.ctx, e.cat, e.source, "public", "orders")
	if err != nil {
		t.Fatal(err)
	}
	eta, ok := st.Backlog.CatchUp(st.MergeRate)
	if want := time.Duration(float64(st.Backlog.Changes) / st.MergeRate * float64(time.Second)); !ok || st.Backlog.Changes != 100 || eta != want {
		t.Errorf("backlog of 100 changes: expected time %s (known %v), want %s (100 changes at %.0f/s)", eta, ok, want, st.MergeRate)
	}
}
