package maintain_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	lakeapi "github.com/tidemark/tidemark/internal/lake"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/maintain"
	"github.com/tidemark/tidemark/internal/silver"
)

// soakDuration is how long TestSoakFootprint's workload runs:
// TIDEMARK_SOAK_DURATION (a Go duration; `make soak` sets 30m), else 2m.
func soakDuration(t *testing.T) time.Duration {
	if s := os.Getenv("TIDEMARK_SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("TIDEMARK_SOAK_DURATION=%q: %v", s, err)
		}
		return d
	}
	return 2 * time.Minute
}

// TestSoakFootprint: a 20,000-row table updated continuously, captured,
// merged into silver with the defaults (every 5s, 16 buckets,
// merge-on-read) and maintained, keeps its footprint near its live data.
// Sampled at every silver commit (the merge step's, and the compaction
// after it; not by wall clock), silver's files take at most
// silver.RatioBound (3) times the bytes of its live rows, measured
// two ways (its own estimate, and the bytes of the fully compacted table at
// the end), and number at most silver.FileBound; bronze, whose small
// files the maintainer's check compacts by day partition (driven here at
// every silver commit), holds fewer than maintain.BronzeCompactFiles data
// files more than its last compaction left, and that compaction left at
// most one file per day partition (plus the appends that raced it); a
// check whose compaction lost every attempt to bronze's own commits (the
// capture commits every 500 ms, as `tidemark run` does) is counted and
// logged, not bounded: maintenance gives way and retries. At
// the end silver equals the source (iceberg-go and PyIceberg) and bronze
// replays to it.
func TestSoakFootprint(t *testing.T) {
	dur := soakDuration(t)
	e := newEnv(t)
	e.commitInterval = time.Duration(config.DefaultCommitInterval) // bronze as `tidemark run` commits
	e.exec(`INSERT INTO items SELECT g, 'v' || g, g FROM generate_series(601, 20000) g`)
	ctx := context.Background()
	c := e.start()
	e.waitCaughtUp(c)

	scat, err := lake.Open(ctx, lake.Config{Warehouse: e.wh}) // the samples' view
	if err != nil {
		t.Fatal(err)
	}
	defer scat.Close()
	mcat, err := lake.Open(ctx, lake.Config{Warehouse: e.wh})
	if err != nil {
		t.Fatal(err)
	}
	defer mcat.Close()
	mt := maintain.New(mcat, maintain.Options{}, testLogger())

	type sample struct {
		what  string
		check silver.FootprintCheck
	}
	var (
		mu         sync.Mutex
		samples    []sample
		failures   []string
		bronzeLeft = -1 // data files the last bronze compaction left
		bronzeComp int
		bronzeLost int // checks whose bronze compaction lost to bronze's commits
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	sampleSilver := func(what string) {
		s, err := scat.Open(ctx, silverID)
		if err != nil {
			fail("%s: open silver: %v", what, err)
			return
		}
		ck, err := silver.CheckFootprint(ctx, s.(lakeapi.Maintained))
		if err != nil {
			fail("%s: %v", what, err)
			return
		}
		mu.Lock()
		samples = append(samples, sample{what, ck})
		mu.Unlock()
		if ck.Over != "" {
			fail("%s: silver passed its footprint bound: %s (%+v)", what, ck.Over, ck.Footprint)
		}
	}
	sampleBronze := func(what string) {
		b, err := scat.Open(ctx, bronzeID)
		if err != nil {
			fail("%s: open bronze: %v", what, err)
			return
		}
		before, _ := b.CurrentSnapshot()
		res, err := mt.Check(ctx, "src")
		if err != nil {
			fail("%s: maintenance check: %v", what, err)
			return
		}
		lost := false
		for _, r := range res {
			if r.Table != strings.Join(bronzeID, ".") {
				continue
			}
			if r.Compact.Snapshot != 0 {
				bronzeComp++
				bronzeLeft = r.After.DataFiles
			}
			if r.CompactError != "" {
				// Bronze committed before each of its attempts: nothing
				// applied, the next check retries (counted, not a bound).
				lost = true
				bronzeLost++
			}
		}
		if err := b.Refresh(ctx); err != nil {
			fail("%s: %v", what, err)
			return
		}
		fp, err := b.(lakeapi.Maintained).Footprint(ctx)
		if err != nil {
			fail("%s: %v", what, err)
			return
		}
		// What the check left: under its trigger, but for the commits
		// bronze made while it ran (one file each).
		after, _ := b.CurrentSnapshot()
		hist, err := b.History(before.ID, after.ID)
		if err != nil {
			fail("%s: bronze history: %v", what, err)
			return
		}
		if bronzeLeft >= 0 && !lost && fp.DataFiles >= bronzeLeft+maintain.BronzeCompactFiles+len(hist) {
			fail("%s: bronze holds %d data files, its last compaction left %d and %d commits followed",
				what, fp.DataFiles, bronzeLeft, len(hist))
		}
	}
	obs := &soakObserver{merged: func() { sampleSilver("after a merge step") }, done: func(r silver.Result) {
		sampleSilver(fmt.Sprintf("after a merge (%d compactions)", r.Compactions))
		sampleBronze("after a merge")
	}}
	// The defaults of `tidemark run` (app.SilverOptions with no --silver-buckets).
	m := silver.NewMerger(mcat, silver.Options{AdaptBuckets: true, Observer: obs}, testLogger())
	mctx, stopMerge := context.WithCancel(ctx)
	mergeDone := make(chan error, 1)
	go func() { mergeDone <- m.Run(mctx, "src", silver.DefaultEvery) }()

	// The workload: batches of 1,000 random rows updated, back to back.
	wctx, stopWork := context.WithTimeout(ctx, dur)
	defer stopWork()
	rounds := 0
	for wctx.Err() == nil {
		e.exec(fmt.Sprintf(`UPDATE items SET v = 's%d-' || md5(random()::text), n = n + 1
			WHERE id IN (SELECT 1 + (random() * 19999)::bigint FROM generate_series(1, 1000))`, rounds))
		rounds++
		time.Sleep(100 * time.Millisecond)
	}
	e.waitCaughtUp(c)
	deadline := time.Now().Add(2 * time.Minute)                                     // bounds a broken run only
	for m.Wake(); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) { // the last merge
		if s, err := scat.Open(ctx, silverID); err == nil && s.Summary()[silver.PropPosition] != "" {
			if b, err := scat.Open(ctx, bronzeID); err == nil && b.Summary()[silver.PropPosition] == s.Summary()[silver.PropPosition] {
				break
			}
		}
	}
	stopMerge()
	if err := <-mergeDone; err != nil && mctx.Err() == nil {
		t.Fatalf("merge loop: %v", err)
	}
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, f := range failures {
		t.Error(f)
	}
	checkAgainstSource(t, e, mcat)
	pyCompare(t, e.wh, strings.Join(silverID, "."), load(t, mcat, silverID))

	// The live bytes: silver compacted whole (the row count and widths are
	// the same throughout the workload).
	full := maintain.New(mcat, maintain.Options{NoExpire: true, NoOrphans: true}, testLogger())
	if _, err := full.Table(ctx, "src", silverID); err != nil {
		t.Fatal(err)
	}
	live := footprint(t, load(t, mcat, silverID)).DataBytes
	worst, worstFiles, merges := 0.0, 0, 0
	if len(samples) == 0 {
		t.Fatal("no silver commit was sampled")
	}
	for _, s := range samples {
		r := float64(s.check.Bytes()) / float64(live)
		worst, worstFiles = max(worst, r), max(worstFiles, s.check.Files())
		if r > silver.RatioBound {
			t.Errorf("%s: silver took %d bytes, %.2f× its %d live bytes (bound %d)", s.what, s.check.Bytes(), r, live, silver.RatioBound)
		}
		if strings.HasPrefix(s.what, "after a merge step") {
			merges++
		}
	}
	t.Logf("%d update rounds, %d merge steps, %d samples; silver worst %.2f× live (%d B), worst %d files (bound %d); %d bronze compactions (%d lost to bronze's commits)",
		rounds, merges, len(samples), worst, live, worstFiles, samples[0].check.FileBound, bronzeComp, bronzeLost)
	if len(samples) == 0 || merges < 3 {
		t.Errorf("only %d merge steps sampled: the soak did not soak", merges)
	}
	if bronzeComp == 0 {
		t.Error("bronze was never compacted by its file count")
	}
}

type soakObserver struct {
	merged func()
	done   func(silver.Result)
}

func (o *soakObserver) Merged(change.TableID, silver.Step) { o.merged() }
func (o *soakObserver) Done(_ change.TableID, r silver.Result, err error) {
	if err == nil && r.Visible() {
		o.done(r)
	}
}
