package app_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestSourceWithoutPasswordOnCommandLine runs `tidemark run` with the
// source given each safe way (docs/configuration.md, Secrets) and checks
// that the pipeline captures rows while the process's arguments
// (/proc/<pid>/cmdline, what ps shows) hold no password and no warning is
// logged; and that --source with a password works but warns, once, without
// the password.
func TestSourceWithoutPasswordOnCommandLine(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "srcways")
	pg.Exec(t, srcURL, `CREATE TABLE w (id int primary key, v text); INSERT INTO w VALUES (1, 'one'), (2, 'two');`)
	u, err := url.Parse(srcURL)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	noPW := *u
	noPW.User = url.User(u.User.Username())
	noPWURL := noPW.String()
	if strings.Contains(noPWURL, pw) {
		t.Fatalf("could not take the password out of the URL")
	}
	dir := t.TempDir()
	srcFile := filepath.Join(dir, "source")
	if err := os.WriteFile(srcFile, []byte(srcURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	passFile := filepath.Join(dir, "pgpass")
	if err := os.WriteFile(passFile, []byte(fmt.Sprintf("%s:%s:*:%s:%s\n", u.Hostname(), u.Port(), u.User.Username(), pw)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "tidemark.yaml")
	if err := os.WriteFile(cfgFile, []byte("source_file: "+srcFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		args []string
		env  []string
		warn bool
	}{
		{"TIDEMARK_SOURCE", nil, []string{config.SourceEnv + "=" + srcURL}, false},
		{"--source-file", []string{"--source-file", srcFile}, nil, false},
		{"source_file key", []string{"--config", cfgFile}, nil, false},
		{"PGPASSWORD", []string{"--source", noPWURL}, []string{"PGPASSWORD=" + pw}, false},
		{"pgpass", []string{"--source", noPWURL}, []string{"PGPASSFILE=" + passFile}, false},
		{"password in --source", []string{"--source", srcURL}, nil, true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "ways" + strconv.Itoa(i)
			wh := filepath.Join(t.TempDir(), "lake")
			args := append([]string{"run", "--warehouse", wh, "--name", name, "--commit-interval", "200ms", "--silver-enabled=false"}, tc.args...)
			cmd := exec.Command(bin, args...)
			cmd.Env = append(cleanEnv(), tc.env...)
			var out syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			defer func() {
				select {
				case <-done:
				default:
					_ = cmd.Process.Signal(syscall.SIGKILL)
					<-done
				}
			}()
			deadline := time.Now().Add(60 * time.Second)
			for len(tryRead(wh, "bronze", name, "public", "w")) < 2 {
				select {
				case err := <-done:
					done <- err
					t.Fatalf("tidemark run exited (%v) before capturing the rows:\n%s", err, out.String())
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("no rows in bronze after 60s:\n%s", out.String())
				}
				time.Sleep(100 * time.Millisecond)
			}
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Contains(cmdline, []byte(pw)); got != tc.warn {
				t.Errorf("password in /proc/<pid>/cmdline: %v, want %v: %q", got, tc.warn, cmdline)
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			if err := <-done; err != nil {
				t.Errorf("tidemark run after SIGTERM: %v\n%s", err, out.String())
			}
			done <- nil
			logs := out.String()
			if strings.Contains(logs, pw) {
				t.Errorf("the password appears in the output:\n%s", logs)
			}
			if n := strings.Count(logs, "process list"); n != map[bool]int{true: 1, false: 0}[tc.warn] {
				t.Errorf("%d warnings about the process list, want warn=%v:\n%s", n, tc.warn, logs)
			}
		})
	}
}

// cleanEnv is the test's environment without the variables that give
// PostgreSQL or tidemark a connection.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, config.SourceEnv+"=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// TestGiveUpNamesLastError checks the last line of a run that gives up on
// an unreachable source: it names the last error (redacted) and what to
// check, on one line.
func TestGiveUpNamesLastError(t *testing.T) {
	bin := testenv.Tidemark(t)
	addr := freeAddr(t) // nothing listens there
	cmd := exec.Command(bin, "run", "--source", "postgres://u:"+url.QueryEscape(canary)+"@"+addr+"/db",
		"--warehouse", filepath.Join(t.TempDir(), "lake"), "--retry-max-elapsed", "1s", "--retry-initial-backoff", "100ms")
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != fault.ExitTransient {
		t.Fatalf("exit %v, want %d:\n%s", err, fault.ExitTransient, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	last := lines[len(lines)-1]
	for _, want := range []string{"exit 4", "last error: connect to source " + addr, "connection refused", "check: nothing accepts connections at " + addr} {
		if !strings.Contains(last, want) {
			t.Errorf("last line lacks %q:\n%s", want, last)
		}
	}
	if strings.Contains(string(out), canary) || strings.Contains(string(out), url.QueryEscape(canary)) {
		t.Errorf("the password appears in the output:\n%s", out)
	}
}
