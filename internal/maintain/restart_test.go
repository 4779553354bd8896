package maintain_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	iceberggo "github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/maintain"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// TestRestartedProcessMaintainsWhenDue: in a crash loop no process lives a
// maintenance period (10 minutes) or a check period (30 s), so a schedule
// kept in memory never maintains anything (issue 22: the storm's silver
// had 2,780 files). What a process does when it starts, by the schedule in
// the lake: a bronze table past its file bound is compacted at once; the
// next run's due time is recorded; a process that starts after it is due
// runs maintenance at once and records the next; one that starts before
// waits for what is left of the period, not a new one.
func TestRestartedProcessMaintainsWhenDue(t *testing.T) {
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	w, err := bronze.NewWriter(ctx, cat, "src", "slot", testLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	id := change.TableID{Schema: "public", Name: "t"}
	s := &change.Schema{Key: []string{"id"}, Fields: []change.Field{{Name: "id", Type: iceberggo.PrimitiveTypes.Int32, SourceType: "integer"}}}
	if _, err := w.OpenTable(ctx, id, s); err != nil {
		t.Fatal(err)
	}
	commits := maintain.BronzeCompactFiles + 8
	for i := 1; i <= commits; i++ {
		lsn := uint64(1000 + i*100)
		c := &change.Change{Table: id, Op: change.OpInsert, Schema: s, Values: []any{int32(i)},
			Pos: change.Position{LSN: lsn, Seq: 1}, CommitTime: time.Unix(int64(lsn), 0)}
		if err := w.Write(ctx, c); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx, pipeline.Checkpoint{Resume: strconv.FormatUint(lsn+1, 10), Pos: lsn, Watermark: time.Unix(int64(lsn), 0)}); err != nil {
			t.Fatal(err)
		}
	}
	files := func() int {
		t.Helper()
		return footprint(t, load(t, cat, bronze.Ident("src", id))).DataFiles
	}
	due := func() time.Time {
		t.Helper()
		props, err := cat.NamespaceProperties(ctx, []string{"bronze", "src"})
		if err != nil {
			t.Fatal(err)
		}
		ms, err := strconv.ParseInt(props[maintain.PropDue], 10, 64)
		if err != nil {
			t.Fatalf("%s = %q: %v", maintain.PropDue, props[maintain.PropDue], err)
		}
		return time.UnixMilli(ms)
	}
	if n := files(); n < commits {
		t.Fatalf("bronze has %d data files after %d commits", n, commits)
	}
	const every = time.Hour
	var runs []error
	start := func() time.Duration { // one process's start
		m := maintain.New(cat, maintain.Options{OnRun: func(err error) { runs = append(runs, err) }}, testLogger())
		return m.Start(ctx, "src", every)
	}

	// The first process: no schedule yet. It compacts bronze (past its
	// bound) and records a run due one period from now.
	before := time.Now().Truncate(time.Millisecond)
	if wait := start(); wait > every || wait < every-time.Minute {
		t.Errorf("first start: next run in %s, want about %s", wait, every)
	}
	if n := files(); n >= maintain.BronzeCompactFiles {
		t.Errorf("bronze has %d data files after a process started, want it compacted at start", n)
	}
	if d := due(); d.Before(before.Add(every)) || d.After(time.Now().Add(every)) {
		t.Errorf("due %s, want one period after the first start (%s)", d, before.Add(every))
	}
	if len(runs) != 0 {
		t.Errorf("a run at the first start, want none: %v", runs)
	}

	// A process starting before the run is due waits for the rest of the
	// period, and does not move the schedule.
	if err := cat.SetNamespaceProperties(ctx, []string{"bronze", "src"},
		map[string]string{maintain.PropDue: strconv.FormatInt(time.Now().Add(10*time.Minute).UnixMilli(), 10)}); err != nil {
		t.Fatal(err)
	}
	recorded := due()
	if wait := start(); wait > 10*time.Minute || wait < 9*time.Minute {
		t.Errorf("start before the run is due: next run in %s, want what is left (about 10m)", wait)
	}
	if len(runs) != 0 || !due().Equal(recorded) {
		t.Errorf("start before the run is due: runs %v, due %s (was %s); want no run, the same due time", runs, due(), recorded)
	}

	// The period went by while processes kept crashing: the next process
	// runs maintenance at once and records the next run.
	if err := cat.SetNamespaceProperties(ctx, []string{"bronze", "src"},
		map[string]string{maintain.PropDue: strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10)}); err != nil {
		t.Fatal(err)
	}
	before = time.Now().Truncate(time.Millisecond)
	if wait := start(); wait != every {
		t.Errorf("start after the run was due: next run in %s, want %s", wait, every)
	}
	if len(runs) != 1 || runs[0] != nil {
		t.Fatalf("start after the run was due: runs %v, want one that succeeded", runs)
	}
	if d := due(); d.Before(before.Add(every)) {
		t.Errorf("due %s after the run, want one period after it (%s or later)", d, before.Add(every))
	}
}
