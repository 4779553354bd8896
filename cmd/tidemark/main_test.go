package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// runOut runs tidemark with args in this process and returns what it
// printed to stdout (help and version) and its exit code.
func runOut(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	stdout = &out
	defer func() { stdout = os.Stdout }()
	code := run(context.Background(), args)
	return out.String(), code
}

var defaultRE = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z-]+)\b.*?(?:\(default ("?[^()]*"?)\))?$`)

// helpDefaults returns the default --help prints for each flag of a
// command ("" when it prints none).
func helpDefaults(t *testing.T, command ...string) map[string]string {
	t.Helper()
	out, code := runOut(t, append(command, "--help")...)
	if code != 0 {
		t.Fatalf("tidemark %s --help: exit %d", strings.Join(command, " "), code)
	}
	defs := map[string]string{}
	for _, m := range defaultRE.FindAllStringSubmatch(out, -1) {
		defs[m[1]] = m[2]
	}
	if len(defs) == 0 {
		t.Fatalf("no flags in the help of %v:\n%s", command, out)
	}
	return defs
}

// TestHelpDefaults checks that what --help prints as defaults is what the
// commands do: the configuration flags print the same defaults for every
// command that takes them (internal/config TestDocsDefaultsMatchCode checks
// those against the code and docs/configuration.md), and `merge`'s layout
// flags the defaults of run's silver flags.
func TestHelpDefaults(t *testing.T) {
	run := helpDefaults(t, "run")
	for flag, want := range map[string]string{
		"commit-interval": "500ms", "silver-every": "5s", "silver-buckets": "16",
		"silver-max-changes": "500000", "silver-delete-mode": `"merge-on-read"`, "silver-enabled": "true",
		"silver-drop-column": `"keep"`, "memory-budget": "256MiB", "warehouse": `"./lake"`, "log-level": `"info"`,
		"commit-bytes": "", "snapshot-chunk-bytes": "", "slot": "", "spool-dir": "",
	} {
		if got, ok := run[flag]; !ok || got != want {
			t.Errorf("run --help: --%s default %q, want %q", flag, got, want)
		}
	}
	for _, cmd := range []string{"tail", "verify", "resnapshot"} {
		for flag, got := range helpDefaults(t, cmd) {
			want, ok := run[flag]
			if !ok {
				continue // the command's own flag
			}
			if flag == "log-level" && cmd != "resnapshot" {
				want = `"warn"` // their output is stdout: tail and verify log warnings only
			}
			if got != want {
				t.Errorf("%s --help: --%s default %q; run's is %q", cmd, flag, got, want)
			}
		}
	}
	merge := helpDefaults(t, "merge")
	for mflag, rflag := range map[string]string{"buckets": "silver-buckets", "max-changes": "silver-max-changes", "delete-mode": "silver-delete-mode", "drop-column": "silver-drop-column", "memory-budget": "memory-budget"} {
		if merge[mflag] != run[rflag] {
			t.Errorf("merge --%s default %q, run --%s default %q", mflag, merge[mflag], rflag, run[rflag])
		}
	}
	for _, cmd := range []string{"run", "tail", "verify", "resnapshot", "merge", "maintain", "status", "show"} {
		out, _ := runOut(t, cmd, "--help")
		for _, line := range strings.Split(out, "\n") {
			// A zero default is a default Validate did not fill in, unless
			// the usage says what zero means (max_value_bytes).
			if (strings.Contains(line, "(default 0s)") || strings.Contains(line, "(default 0B)")) && !strings.Contains(line, "0: no maximum") {
				t.Errorf("%s --help prints a zero default: %s", cmd, line)
			}
		}
	}
}

// TestVersionOutput checks --version and `tidemark version`.
func TestVersionOutput(t *testing.T) {
	version, commit = "v1.2.3", "0123456789abcdef0123456789abcdef01234567"
	defer func() { version, commit = "", "" }()
	a, code := runOut(t, "--version")
	b, code2 := runOut(t, "version")
	if code != 0 || code2 != 0 {
		t.Fatalf("exit codes %d, %d", code, code2)
	}
	if a != b {
		t.Errorf("--version printed %q, version printed %q", a, b)
	}
	if !strings.HasPrefix(a, "tidemark v1.2.3\ncommit 0123456789abcdef0123456789abcdef01234567\ngo") {
		t.Errorf("--version printed %q", a)
	}

	stamped := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "feedface"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		version, commit string
		bi              *debug.BuildInfo
		want            string
	}{
		{"", "", stamped, "tidemark dev\ncommit feedface+dirty\n"},
		{"v2.0.0", "", stamped, "tidemark v2.0.0\ncommit feedface+dirty\n"},
		{"v2.0.0", "c0ffee+dirty", stamped, "tidemark v2.0.0\ncommit c0ffee+dirty\n"},
		{"", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}}, "tidemark v0.4.0\ncommit unknown"},
		{"", "", nil, "tidemark dev\ncommit unknown"},
	} {
		if got := describeVersion(tc.version, tc.commit, tc.bi); !strings.HasPrefix(got, tc.want) {
			t.Errorf("describeVersion(%q, %q, ...) = %q, want it to start with %q", tc.version, tc.commit, got, tc.want)
		}
	}
}

// TestVersionLdflags builds tidemark as make build does and checks that
// -X main.version and -X main.commit reach --version.
func TestVersionLdflags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "tidemark")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v9.8.7 -X main.commit=abc123+dirty", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, arg := range []string{"--version", "version"} {
		out, err := exec.Command(bin, arg).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "tidemark v9.8.7\ncommit abc123+dirty\n") {
			t.Errorf("tidemark %s: %v\n%s", arg, err, out)
		}
	}
}

// TestTailBadFormat: a --format tail does not know is a usage error
// (exit 2) whose message names the allowed shapes, before any connection;
// --debezium-schema without --format debezium likewise.
func TestTailBadFormat(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--format", "avro"}, []string{`"avro"`, "tidemark", "debezium", "beam"}},
		{[]string{"--format", "beam", "--debezium-schema"}, []string{"--debezium-schema", "--format debezium"}},
		{[]string{"--poll-timeout", "-1s"}, []string{"--poll-timeout", "negative"}},
	} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		saved := os.Stderr
		os.Stderr = w
		_, code := runOut(t, append([]string{"tail", "--source", "postgres://u@127.0.0.1:1/db"}, c.args...)...)
		os.Stderr = saved
		w.Close()
		var msg bytes.Buffer
		_, _ = msg.ReadFrom(r)
		r.Close()
		if code != 2 {
			t.Errorf("tail %v: exit %d, want 2 (usage)\n%s", c.args, code, &msg)
		}
		for _, s := range c.want {
			if !strings.Contains(msg.String(), s) {
				t.Errorf("tail %v: message %q does not name %s", c.args, strings.TrimSpace(msg.String()), s)
			}
		}
	}
}
