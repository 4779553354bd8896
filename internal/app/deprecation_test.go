package app_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestRunWarnsDeprecatedKeys: `tidemark run` (and verify) with a config
// file that uses the top-level slot: and publication: logs one WARN for
// each at start,
// naming the key, the file and line, and the new spelling, never a value;
// the same settings in the source block log none. The source is a closed
// port: the warning comes before any connection.
func TestRunWarnsDeprecatedKeys(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	const pw = "s3cr3t-canary"
	const value = "s3cr3t_canary" // a valid slot and publication name
	src := "postgres://app:" + pw + "@" + freeAddr(t) + "/shop?connect_timeout=2"
	write := func(body string) string {
		p := filepath.Join(t.TempDir(), "tidemark.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// run runs tidemark to its exit: the retry budget for the closed port.
	run := func(cfgPath string) string {
		code, out := runBin(t, bin, nil, "run", "--config", cfgPath, "--warehouse", t.TempDir(), "--retry-max-elapsed", "1s")
		if code != fault.ExitTransient {
			t.Errorf("exit code %d against a closed port, want %d; output:\n%s", code, fault.ExitTransient, out)
		}
		if strings.Contains(out, pw) {
			t.Errorf("the password appears in the output:\n%s", out)
		}
		return out
	}
	warnings := func(out string) []string {
		var ws []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "deprecated config key") {
				ws = append(ws, l)
				if strings.Contains(l, value) {
					t.Errorf("a warning shows the key's value: %s", l)
				}
			}
		}
		return ws
	}

	old := write("source: " + src + "\nslot: " + value + "\npublication: pub_" + value + "\n")
	out := run(old)
	ws := warnings(out)
	if len(ws) != 2 {
		t.Fatalf("%d deprecation warnings, want 2 (slot, publication); output:\n%s", len(ws), out)
	}
	for i, want := range []string{
		"level=WARN msg=\"deprecated config key\" key=slot use=source.slot file=" + old + " line=2",
		"level=WARN msg=\"deprecated config key\" key=publication use=source.publication file=" + old + " line=3",
	} {
		if !strings.Contains(ws[i], want) {
			t.Errorf("warning %q, want it to contain %q", ws[i], want)
		}
	}

	// Every command that reads the config warns, not only run.
	_, out = runBin(t, bin, nil, "verify", "--config", old, "--warehouse", t.TempDir())
	if ws := warnings(out); len(ws) != 2 {
		t.Errorf("tidemark verify logs %d deprecation warnings, want 2; output:\n%s", len(ws), out)
	}

	block := write("source:\n  url: " + src + "\n  slot: shop_slot\n  publication: shop_pub\n")
	out = run(block)
	if ws := warnings(out); len(ws) != 0 {
		t.Errorf("the source block logs deprecation warnings: %q", ws)
	}
}
