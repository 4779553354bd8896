package failpoint

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		wantErr string
		names   int
	}{
		{spec: "", names: 0},
		{spec: "a=exit", names: 1},
		{spec: "a=exit; b=2*panic, c=sleep(15)", names: 3},
		{spec: "a", wantErr: "not name=action"},
		{spec: "a=", wantErr: "not name=action"},
		{spec: "a=explode", wantErr: "unknown action"},
		{spec: "a=sleep(x)", wantErr: "sleep(milliseconds)"},
		{spec: "a=0*exit", wantErr: "positive hit count"},
		{spec: "a=exit;a=panic", wantErr: "given twice"},
	} {
		pts, err := parse(tc.spec)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parse(%q) = %v, want an error containing %q", tc.spec, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(pts) != tc.names {
			t.Errorf("parse(%q) = %d points, %v; want %d", tc.spec, len(pts), err, tc.names)
		}
	}
}

func TestInject(t *testing.T) {
	t.Cleanup(func() { Enable("") })
	Inject("nothing-enabled") // no-op

	if err := Enable("p=panic;s=sleep(30);n=3*panic"); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != "failpoint p" {
				t.Errorf("recovered %v, want the failpoint's panic", r)
			}
		}()
		Inject("p")
		t.Error("Inject(p) returned")
	}()
	start := time.Now()
	Inject("s")
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("sleep(30) slept %s", d)
	}
	Inject("other") // not configured: no-op
	Inject("n")
	Inject("n") // hits 1 and 2 pass
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("third hit of n did not panic")
			}
		}()
		Inject("n")
	}()
	Inject("n") // fires only once
	if Hits("n") != 4 {
		t.Errorf("Hits(n) = %d, want 4", Hits("n"))
	}
	Enable("")
	Inject("p") // disabled again
}

// TestExitLikeKill runs this test binary with the failpoint enabled through
// the environment and checks that it dies with 137 at the point.
func TestExitLikeKill(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		Inject("here")
		os.Exit(0) // not reached
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestExitLikeKill$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", EnvVar+"=here=exit")
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != ExitCode {
		t.Fatalf("child: %v, want exit %d\n%s", err, ExitCode, out)
	}
	if !strings.Contains(string(out), "failpoint here: exit") {
		t.Errorf("child output lacks the failpoint line:\n%s", out)
	}
}

func BenchmarkInjectDisabled(b *testing.B) {
	Enable("")
	for i := 0; i < b.N; i++ {
		Inject("bronze-before-commit")
	}
}

func TestErrAndOnHit(t *testing.T) {
	t.Cleanup(func() { Enable("") })
	if err := Err("none"); err != nil {
		t.Fatalf("Err with nothing enabled = %v", err)
	}
	if err := Enable("e=2*error;i=error"); err != nil {
		t.Fatal(err)
	}
	if err := Err("e"); err != nil {
		t.Errorf("first hit of e = %v, want nil (fires on the 2nd)", err)
	}
	if err := Err("e"); !errors.Is(err, ErrInjected) || !strings.Contains(err.Error(), "failpoint e") {
		t.Errorf("second hit of e = %v, want ErrInjected naming e", err)
	}
	if err := Err("e"); err != nil {
		t.Errorf("third hit of e = %v, want nil", err)
	}
	Inject("i") // an error action at an Inject point only counts
	if Hits("i") != 1 {
		t.Errorf("Hits(i) = %d, want 1", Hits("i"))
	}
	calls := 0
	remove := OnHit("h", func() { calls++ })
	Inject("h")
	if err := Err("h"); err != nil {
		t.Errorf("Err at a hook point = %v", err)
	}
	if calls != 2 {
		t.Errorf("hook called %d times, want 2", calls)
	}
	if err := Err("e"); err != nil { // the configured points survive the hook
		t.Errorf("fourth hit of e = %v", err)
	}
	if Hits("e") != 4 {
		t.Errorf("Hits(e) = %d after OnHit, want 4 (configuration kept)", Hits("e"))
	}
	remove()
	Inject("h")
	if calls != 2 {
		t.Errorf("hook called after removal")
	}
	if Hits("e") != 4 {
		t.Errorf("configuration lost on removing the hook")
	}
}
