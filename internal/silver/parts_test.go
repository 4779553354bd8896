package silver_test

import (
	"fmt"
	"testing"

	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/silver"
)

// One source transaction larger than a merge step (issue 22) is merged in
// parts committed once: silver ends as a single step of it would leave it
// (the same rows, at the same positions), in one commit; a crash between
// two parts, or before the commit, leaves silver at its previous commit,
// and the next merge redoes the step whole. The transaction updates rows
// leaving a TOAST column unchanged, deletes, inserts, changes keys in
// chains (whose new rows take the old row's unchanged column) and
// truncates the table half-way (the changes before it are void).
func TestTransactionLargerThanAStepMergesInParts(t *testing.T) {
	const keys = 300
	var snap, big []string
	for i := 1; i <= keys; i++ {
		snap = append(snap, fmt.Sprintf("r %d v%d B%d", i, i, i))
	}
	for i := 1; i <= keys; i++ {
		switch {
		case i%10 == 0:
			big = append(big, fmt.Sprintf("d %d - -", i))
		case i%7 == 0 && i+1000 <= 2000:
			// A key change, then a change of the new key's row again.
			big = append(big, fmt.Sprintf("d %d - -", i), fmt.Sprintf("c %d k%d ~", i+1000, i))
		default:
			big = append(big, fmt.Sprintf("u %d u%d ~", i, i))
		}
	}
	for i := 7; i <= keys; i += 7 {
		if i%10 != 0 {
			big = append(big, fmt.Sprintf("d %d - -", i+1000), fmt.Sprintf("c %d kk%d ~", i+2000, i))
		}
	}
	// New keys, changed again in the transaction (TOAST unchanged).
	var inserts []string
	for i := 1; i <= 100; i++ {
		inserts = append(inserts, fmt.Sprintf("c %d new%d N%d", keys+i, i, i), fmt.Sprintf("u %d again%d ~", keys+i, i))
	}
	// Truncated half-way: the changes before are void, the rows after
	// are new.
	truncated := append(append(append([]string{}, big[:len(big)/2]...), "t - - -"), inserts...)
	big = append(big, inserts...)

	run := func(t *testing.T, format string, opts silver.Options, tx []string, crash string) ([]string, silver.Result) {
		e := newLakeEnv(t)
		if format == "delta" {
			e = newDeltaLakeEnv(t)
		}
		s := ordersSchema()
		e.open(ordersID, s)
		e.tx(ordersID, s, snapDone, snap...)
		e.merge(e.merger(opts), ordersID)
		before := e.rows(silverIdent(ordersID))
		e.tx(ordersID, s, nil, tx...)
		e.tx(ordersID, s, nil, fmt.Sprintf("u %d after ~", keys+1), "c 5000 late L")
		if crash != "" {
			if err := failpoint.Enable(crash); err != nil {
				t.Fatal(err)
			}
			func() {
				defer func() {
					if recover() == nil {
						t.Fatalf("the merge did not reach %s", crash)
					}
				}()
				e.merge(e.merger(opts), ordersID)
			}()
			if err := failpoint.Enable(""); err != nil {
				t.Fatal(err)
			}
			equalLines(t, "silver after a crash inside the merge in parts", e.rows(silverIdent(ordersID)), before)
		}
		res := e.merge(e.merger(opts), ordersID)
		if res.DeadLetters != 0 {
			t.Errorf("merge: %+v, want no dead letters", res)
		}
		return e.rows(silverIdent(ordersID)), res
	}
	for _, format := range []string{"iceberg", "delta"} {
		for _, tc := range []struct {
			name  string
			tx    []string
			crash string
		}{
			{"updates, deletes, inserts, key changes", big, ""},
			{"with a truncate", truncated, ""},
			{"crash between two parts", big, "silver-part-staged=3*panic"},
			{"crash before the commit", truncated, "silver-parts-before-commit=1*panic"},
		} {
			t.Run(format+"/"+tc.name, func(t *testing.T) {
				want, one := run(t, format, silver.Options{}, tc.tx, "")
				if one.InParts != 0 {
					t.Fatalf("with the defaults: %+v, want one step", one)
				}
				got, res := run(t, format, silver.Options{MaxChanges: 60}, tc.tx, tc.crash)
				equalLines(t, "silver merged in parts against one step", got, want)
				if res.InParts != 1 || res.Commits != 2 {
					t.Errorf("merge: %+v, want 2 commits, the first in parts", res)
				}
			})
		}
	}
}
