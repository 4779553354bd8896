package app_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestSilverMergeFailingStopsRun: a silver merge that keeps failing the
// same way (a persistent bronze read failure, injected) stops `tidemark
// run` with the named error after silver.DefaultMaxFailures attempts, and
// `tidemark status` shows it with the table, the cause and the fix.
func TestSilverMergeFailingStopsRun(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "failing")
	pg.Exec(t, srcURL, `CREATE TABLE f (id int PRIMARY KEY, v text); INSERT INTO f VALUES (1, 'a');`)
	source := sourceName(t, srcURL)
	wh := filepath.Join(t.TempDir(), "lake")
	cmd := exec.Command(bin, "run", "--warehouse", wh, "--silver-every", "100ms", "--commit-interval", "200ms")
	cmd.Env = append(cleanEnv(), config.SourceEnv+"="+srcURL, failpoint.EnvVar+"=silver-read-bronze=error")
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("tidemark run did not stop within 2 minutes:\n%s", out)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != fault.ExitFatal {
		t.Fatalf("exit %v, want %d:\n%s", err, fault.ExitFatal, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("the last lines of tidemark run:\n%s", strings.Join(lines[max(0, len(lines)-2):], "\n"))
	table := "silver." + source + ".public.f"
	if n := strings.Count(string(out), "[silver_merge_failing] silver table "+table+": 5 merges in a row failed"); n != 1 {
		t.Errorf("%d lines name the failure, want 1:\n%s", n, out)
	}
	st, err := exec.Command(bin, "status", "--warehouse", wh, "--format", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark status: %v\n%s", err, st)
	}
	for _, want := range []string{"failing: [silver_merge_failing] 5 merges in a row", failpoint.ErrInjected.Error(), "fix: "} {
		if !strings.Contains(string(st), want) {
			t.Errorf("status lacks %q:\n%s", want, st)
		}
	}
}
