package silver_test

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/silver"
)

// A table updated in many small merge steps stays near its live data:
// after every step its files take at most CompactRatio+1 times the bytes
// of its live rows and number at most FileBound, and it reads the same as
// the source. Without the merger's own compaction the same workload
// passes both bounds (which is what the test would catch).
func TestMergeKeepsFootprintNearLiveData(t *testing.T) {
	for _, tc := range []struct {
		name string
		auto bool
	}{{"compacted by its footprint", true}, {"no auto compaction", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newLakeEnv(t)
			s := ordersSchema()
			e.open(ordersID, s)
			const rows, steps, perStep = 2000, 24, 1000
			want := map[int]string{}
			var snap []string
			for k := 1; k <= rows; k++ {
				want[k] = fmt.Sprintf("v0-%d", k)
				snap = append(snap, fmt.Sprintf("r %d %s B%d", k, want[k], k))
			}
			e.tx(ordersID, s, snapDone, snap...)
			// Sampled at every silver commit: the merge step's (before the
			// merger compacts, through the Observer) and the compaction's.
			var over []string
			compactions, worstRatio, worstFiles := 0, 0.0, 0
			sample := func(what string) {
				c := e.footprint()
				worstRatio, worstFiles = max(worstRatio, c.Ratio), max(worstFiles, c.Files())
				if c.Over != "" {
					over = append(over, fmt.Sprintf("%s: %s (%+v)", what, c.Over, c.Footprint))
				}
				if live := c.Records - c.DeletedRecords; live != rows {
					t.Fatalf("%s: the footprint counts %d live rows, want %d", what, live, rows)
				}
			}
			obs := &sampler{fn: func() { sample("after a merge step") }}
			m := e.merger(silver.Options{NoAutoCompact: !tc.auto, Observer: obs})
			if res := e.merge(m, ordersID); !res.Published {
				t.Fatalf("first merge: %+v", res)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for step := 1; step <= steps; step++ {
				var ch []string
				for range perStep {
					k := 1 + rng.IntN(rows)
					want[k] = fmt.Sprintf("v%d-%d", step, rng.IntN(1<<30))
					ch = append(ch, fmt.Sprintf("u %d %s ~", k, want[k]))
				}
				e.tx(ordersID, s, nil, ch...)
				res := e.merge(m, ordersID)
				compactions += res.Compactions
				sample(fmt.Sprintf("after merge %d", step))
			}
			if obs.n < steps {
				t.Fatalf("the observer saw %d merge steps, want %d", obs.n, steps)
			}
			t.Logf("%d compactions; worst ratio %.2f, worst files %d (bound %d)", compactions, worstRatio, worstFiles, silver.FileBound(silver.DefaultBuckets))
			var wantLines []string
			for k, v := range want {
				wantLines = append(wantLines, fmt.Sprintf("id=%d v=%s big=B%d", k, v, k))
			}
			equalLines(t, "silver after the steps", e.rows(silverIdent(ordersID), "id", "v", "big"), renderSorted(wantLines))
			if !tc.auto {
				if len(over) == 0 {
					t.Errorf("without auto compaction the footprint stayed within its bounds (worst ratio %.2f, files %d): the workload does not test them",
						worstRatio, worstFiles)
				}
				return
			}
			if len(over) > 0 {
				t.Errorf("the footprint passed its bounds:\n  %s", strings.Join(over, "\n  "))
			}
			if compactions == 0 {
				t.Error("no step compacted the table")
			}
			// The published table's files are under its own name.
			var building []string
			filepath.WalkDir(e.wh, func(p string, d fs.DirEntry, err error) error {
				if err == nil && strings.Contains(p, "_building") {
					building = append(building, p)
				}
				return nil
			})
			if len(building) > 0 {
				t.Errorf("files under a _building directory: %v", building[:min(len(building), 3)])
			}
		})
	}
}

func renderSorted(lines []string) []string {
	slices.Sort(lines)
	return lines
}

func (e *lakeEnv) footprint() silver.FootprintCheck {
	e.t.Helper()
	tbl, err := e.cat.Open(e.ctx, silverIdent(ordersID))
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := silver.CheckFootprint(e.ctx, tbl.(lake.Maintained))
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// sampler calls fn at every merge step a Merger reports.
type sampler struct {
	fn func()
	n  int
}

func (s *sampler) Merged(change.TableID, silver.Step)        { s.n++; s.fn() }
func (s *sampler) Done(change.TableID, silver.Result, error) {}
