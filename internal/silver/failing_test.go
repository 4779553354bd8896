package silver_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/silver"
)

// TestMergeFailingBecomesNamedError: a merge that fails the same way again
// and again (a persistent bronze read failure, injected) becomes
// fault.ErrSilverMergeFailing after DefaultMaxFailures attempts: Run stops
// with it, naming the table, the cause and the fix, and status shows it
// until a merge of the table succeeds.
func TestMergeFailingBecomesNamedError(t *testing.T) {
	e := newLakeEnv(t)
	s := ordersSchema()
	e.open(ordersID, s)
	e.tx(ordersID, s, snapDone, "r 1 a A", "r 2 b B")
	if err := failpoint.Enable("silver-read-bronze=error"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { failpoint.Enable("") })
	m := e.merger(silver.Options{})
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	err := m.Run(ctx, e.source, 10*time.Millisecond)
	if !errors.Is(err, fault.ErrSilverMergeFailing) {
		t.Fatalf("Run returned %v, want %s", err, fault.ErrSilverMergeFailing.Code)
	}
	if n := failpoint.Hits("silver-read-bronze"); n != silver.DefaultMaxFailures {
		t.Errorf("bronze was read %d times, want %d attempts", n, silver.DefaultMaxFailures)
	}
	if code := fault.ExitCode(err); code != fault.ExitFatal {
		t.Errorf("exit code %d, want %d", code, fault.ExitFatal)
	}
	table := strings.Join(silverIdent(ordersID), ".")
	for _, want := range []string{table, "5 merges in a row failed the same way", failpoint.ErrInjected.Error(), "fix:", "tidemark merge"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
	st, err := silver.State(e.ctx, e.cat, e.source, ordersID.Schema, ordersID.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Failing == nil || st.Failing.Attempts != silver.DefaultMaxFailures || !strings.Contains(st.Failing.Cause, failpoint.ErrInjected.Error()) ||
		st.Failing.Code != fault.ErrSilverMergeFailing.Code {
		t.Fatalf("status: %+v, want the named failure", st.Failing)
	}
	if s := st.Failing.String(); !strings.Contains(s, "failing: [silver_merge_failing]") || !strings.Contains(s, "fix:") {
		t.Errorf("status line %q", s)
	}

	// Fewer failures than the bound, or different ones, are not named.
	m = e.merger(silver.Options{MaxFailures: 3})
	for i := 1; i <= 2; i++ {
		if _, err := m.MergeTable(e.ctx, e.source, ordersID.Schema, ordersID.Name); err == nil || errors.Is(err, fault.ErrSilverMergeFailing) {
			t.Fatalf("attempt %d: %v, want the injected error itself", i, err)
		}
	}

	// The cause is fixed: the next merge succeeds and status forgets it.
	failpoint.Enable("")
	e.merge(m, ordersID)
	if st, err = silver.State(e.ctx, e.cat, e.source, ordersID.Schema, ordersID.Name); err != nil || st.Failing != nil || !st.Published {
		t.Fatalf("after a successful merge: %+v, %v", st, err)
	}
	equalLines(t, "silver", e.rows(silverIdent(ordersID), "id", "v"), []string{"id=1 v=a", "id=2 v=b"})
}
