package bench_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bench"
	"github.com/tidemark/tidemark/internal/testenv"
)

// pipelineEnv makes the test binary, re-executed by the harness, run a
// tidemark pipeline instead of the tests: the smoke test needs no build.
const pipelineEnv = "TIDEMARK_BENCH_PIPELINE"

func TestMain(m *testing.M) {
	if os.Getenv(pipelineEnv) == "1" {
		os.Exit(bench.PipelineMain(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

// TestHarnessSmoke runs every scenario once at toy sizes and checks that
// the harness produced a well-formed table with a row for each. It asserts
// nothing about speed: the figures of a toy run on a shared machine mean
// nothing, and a timed assertion would only be flaky.
func TestHarnessSmoke(t *testing.T) {
	if _, err := testenv.BinDir(); err != nil {
		if errors.Is(err, testenv.ErrNoPostgres) && os.Getenv("TIDEMARK_REQUIRE_PG") != "1" {
			t.Skipf("skipping: %v", err)
		}
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log bytes.Buffer
	rep, err := bench.Run(ctx, bench.Options{
		Launcher: bench.Launcher{Path: os.Args[0], Env: []string{pipelineEnv + "=1"}},
		WorkDir:  t.TempDir(),
		// Fast cadences: only the harness is under test here.
		PipelineArgs:    []string{"--commit-interval", "200ms", "--silver-every", "300ms", "--heartbeat-interval", "200ms"},
		Reps:            1,
		CDCChanges:      2000,
		CDCWideChanges:  1000,
		CDCClients:      1,
		SnapshotScale:   1,
		SnapshotWide:    2000,
		LatencyRate:     500,
		LatencyBatch:    5,
		LatencyDuration: 2 * time.Second,
		MergeRows:       2000,
		MergeFactor:     10,
		MergeKeys:       100,
		BigRows:         2,
		BigValueBytes:   1 << 20,
		HugeValueBytes:  2 << 20,
		BacklogChanges:  2000,
		BacklogCommits:  20,
		Log:             &log,
	})
	if err != nil {
		t.Fatalf("bench run: %v\nprogress:\n%s", err, log.String())
	}
	var md bytes.Buffer
	if err := rep.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	t.Logf("progress:\n%s\nreport:\n%s", log.String(), md.String())
	rows, err := bench.ParseTable(md.String())
	if err != nil {
		t.Fatalf("the report's table is malformed: %v", err)
	}
	have := map[string]bool{}
	for _, r := range rows {
		id, _, _ := strings.Cut(r.Scenario, " ")
		have[id] = true
	}
	for _, id := range []string{"1a", "1b", "2a", "2b", "2c", "2d", "3", "4", "5a", "5b", "5c", "6", "7a", "7b", "8a", "8b"} {
		if !have[id] {
			t.Errorf("the table has no row for scenario %s", id)
		}
	}
}

// TestHarnessSmokeMySQL runs the MySQL scenarios once at toy sizes on a
// throwaway MariaDB and checks the table has their rows; as above, no time
// is asserted. The harness itself checks that the bare reader decoded as
// many changes as were written and that SELECT * read every row.
func TestHarnessSmokeMySQL(t *testing.T) {
	if _, err := testenv.MariaDBBinDir(); err != nil {
		if os.Getenv("TIDEMARK_REQUIRE_MARIADB") != "1" {
			t.Skipf("skipping: %v", err)
		}
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log bytes.Buffer
	rep, err := bench.Run(ctx, bench.Options{
		Launcher:      bench.Launcher{Path: os.Args[0], Env: []string{pipelineEnv + "=1"}},
		Source:        "mysql",
		WorkDir:       t.TempDir(),
		PipelineArgs:  []string{"--commit-interval", "200ms", "--silver-every", "300ms"},
		Reps:          1,
		CDCChanges:    2000,
		CDCClients:    2,
		SnapshotScale: 1,
		Log:           &log,
	})
	if err != nil {
		t.Fatalf("bench run: %v\nprogress:\n%s", err, log.String())
	}
	var md bytes.Buffer
	if err := rep.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	t.Logf("progress:\n%s\nreport:\n%s", log.String(), md.String())
	rows, err := bench.ParseTable(md.String())
	if err != nil {
		t.Fatalf("the report's table is malformed: %v", err)
	}
	have := map[string]bool{}
	for _, r := range rows {
		id, _, _ := strings.Cut(r.Scenario, " ")
		have[id] = true
	}
	for _, id := range []string{"M1", "M1′", "M2a", "M2c", "M2′"} {
		if !have[id] {
			t.Errorf("the table has no row for scenario %s", id)
		}
	}
}

func TestParseTableRejectsMalformed(t *testing.T) {
	good := "| scenario | tidemark | baseline | ratio | target | met? |\n|---|---|---|---|---|---|\n| 1a x | 1 | 2 | 0.50 | ≥ 0.8 | no |\n"
	if _, err := bench.ParseTable(good); err != nil {
		t.Fatalf("a good table was refused: %v", err)
	}
	for name, md := range map[string]string{
		"no header":    "| a | b |\n",
		"no rows":      "| scenario | tidemark | baseline | ratio | target | met? |\n|---|---|---|---|---|---|\n",
		"short row":    "| scenario | tidemark | baseline | ratio | target | met? |\n|---|---|---|---|---|---|\n| 1a | 1 | 2 |\n",
		"empty cell":   "| scenario | tidemark | baseline | ratio | target | met? |\n|---|---|---|---|---|---|\n| 1a |  | 2 | 1 | t | yes |\n",
		"bad met":      "| scenario | tidemark | baseline | ratio | target | met? |\n|---|---|---|---|---|---|\n| 1a | 1 | 2 | 1 | t | maybe |\n",
		"no separator": "| scenario | tidemark | baseline | ratio | target | met? |\n| 1a | 1 | 2 | 1 | t | yes |\n",
	} {
		if _, err := bench.ParseTable(md); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
