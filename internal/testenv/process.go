package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Runner starts `tidemark run` sessions as subprocesses against one source
// and warehouse (crash tests: SIGKILL at any moment, restart), every
// session's output going to one log file. When the test fails, cleanup
// dumps every warning and error of every session and the tail of each.
type Runner struct {
	t       *testing.T
	Bin     string
	Args    []string // the command line: run --source ... --warehouse ...
	Env     []string // added to the environment of the sessions started next
	LogPath string
	runs    []*Session
}

// Session is one tidemark process started by a Runner.
type Session struct {
	N      int
	Cmd    *exec.Cmd
	Done   chan struct{} // closed when the process has exited
	Err    error         // from Wait, valid once Done is closed
	Offset int64         // where this session's log starts
	// logPath is the log file, bodyAt where the session's own lines
	// start in it (after the header Start writes).
	logPath string
	bodyAt  int64
}

// NewRunner prepares tidemark sessions of srcURL into a fresh warehouse,
// which it returns. TIDEMARK_E2E_KEEP=dir keeps the warehouse and the logs
// in a new directory under dir for a post-mortem.
func NewRunner(t *testing.T, bin, srcURL string, extraArgs ...string) (*Runner, string) {
	t.Helper()
	root := t.TempDir()
	if keep := os.Getenv("TIDEMARK_E2E_KEEP"); keep != "" {
		var err error
		if root, err = os.MkdirTemp(keep, "e2e-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("keeping the warehouse and logs in %s", root)
	}
	wh := filepath.Join(root, "lake")
	r := &Runner{t: t, Bin: bin, LogPath: filepath.Join(root, "tidemark.log"), Args: append([]string{
		"run", "--source", srcURL, "--warehouse", wh,
		"--commit-interval", "200ms", "--heartbeat-interval", "200ms", "--log-level", "debug",
	}, extraArgs...)}
	t.Cleanup(r.cleanup)
	return r, wh
}

// As is the runner's run flags for another command (verify, resnapshot).
func (r *Runner) As(cmd string, extra ...string) []string {
	return append(append([]string{cmd}, r.Args[1:]...), extra...)
}

// Start starts a session.
func (r *Runner) Start() *Session {
	r.t.Helper()
	f, err := os.OpenFile(r.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	off, _ := f.Seek(0, 2)
	s := &Session{N: len(r.runs) + 1, Done: make(chan struct{}), Offset: off}
	fmt.Fprintf(f, "===== tidemark session %d started %s =====\n", s.N, time.Now().Format(time.RFC3339Nano))
	s.logPath = r.LogPath
	s.bodyAt, _ = f.Seek(0, 1)
	s.Cmd = exec.Command(r.Bin, r.Args...)
	if len(r.Env) > 0 {
		s.Cmd.Env = append(os.Environ(), r.Env...)
	}
	s.Cmd.Stdout, s.Cmd.Stderr = f, f
	if err := s.Cmd.Start(); err != nil {
		r.t.Fatalf("start tidemark: %v", err)
	}
	go func() {
		s.Err = s.Cmd.Wait()
		close(s.Done)
	}()
	r.runs = append(r.runs, s)
	return s
}

// Exited says whether the session's process has exited.
func (s *Session) Exited() bool {
	select {
	case <-s.Done:
		return true
	default:
		return false
	}
}

// Kill SIGKILLs the session and waits for it to be gone.
func (s *Session) Kill(t *testing.T) {
	t.Helper()
	if s.Exited() {
		t.Fatalf("tidemark session %d exited by itself before it was killed: %v", s.N, s.Err)
	}
	_ = s.Cmd.Process.Signal(syscall.SIGKILL)
	<-s.Done
}

// Stop SIGTERMs the session and returns its exit code.
func (s *Session) Stop(t *testing.T, timeout time.Duration) int {
	t.Helper()
	if s.Exited() {
		t.Fatalf("tidemark session %d exited by itself before it was stopped: %v", s.N, s.Err)
	}
	s.waitStarted(10 * time.Second)
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.Done:
	case <-time.After(timeout):
		_ = s.Cmd.Process.Signal(syscall.SIGKILL)
		<-s.Done
		t.Fatalf("tidemark session %d did not stop within %s of SIGTERM", s.N, timeout)
	}
	return s.Cmd.ProcessState.ExitCode()
}

// waitStarted waits, up to limit, until the session has written its first
// log line: tidemark's main has then installed its SIGTERM handler. A
// SIGTERM sent before that (a session stopped right after it started)
// would kill the process by the signal's default action, not stop it.
func (s *Session) waitStarted(limit time.Duration) {
	for end := time.Now().Add(limit); time.Now().Before(end) && !s.Exited(); time.Sleep(10 * time.Millisecond) {
		if st, err := os.Stat(s.logPath); err != nil || st.Size() > s.bodyAt {
			return
		}
	}
}

// cleanup kills whatever is still running and, if the test failed, dumps
// the logs: every warning and error of every session, and the tail of each.
func (r *Runner) cleanup() {
	for _, s := range r.runs {
		if !s.Exited() {
			_ = s.Cmd.Process.Signal(syscall.SIGKILL)
			<-s.Done
		}
	}
	if !r.t.Failed() {
		return
	}
	data, err := os.ReadFile(r.LogPath)
	if err != nil {
		r.t.Logf("read tidemark log %s: %v", r.LogPath, err)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "tidemark logs (%s, %d bytes); warnings and errors of all sessions:\n", r.LogPath, len(data))
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.HasPrefix(line, "tidemark:") || strings.HasPrefix(line, "=====") {
			b.WriteString(line + "\n")
		}
	}
	const tail = 60
	for i, s := range r.runs {
		end := int64(len(data))
		if i+1 < len(r.runs) {
			end = r.runs[i+1].Offset
		}
		lines := strings.Split(strings.TrimRight(string(data[s.Offset:end]), "\n"), "\n")
		if len(lines) > tail {
			lines = lines[len(lines)-tail:]
		}
		fmt.Fprintf(&b, "----- last %d lines of session %d (exit: %v) -----\n%s\n", len(lines), s.N, s.Err, strings.Join(lines, "\n"))
	}
	r.t.Log(b.String())
}

// PyIcebergRead reads a lake table with PyIceberg (scripts/pyiceberg_read.py),
// addressing it by its identifier levels; numbers stay json.Number. It
// returns nil, false when TIDEMARK_PYTHON is not set.
func PyIcebergRead(t *testing.T, wh string, ident []string) ([]map[string]any, bool) {
	t.Helper()
	_, rows, ok := PyIcebergReadTyped(t, wh, ident)
	return rows, ok
}

// PyIcebergReadTyped is PyIcebergRead that also returns the table's column
// types as PyIceberg names them (column name to type string).
func PyIcebergReadTyped(t *testing.T, wh string, ident []string) (map[string]string, []map[string]any, bool) {
	t.Helper()
	return pyIcebergRead(t, []string{"--warehouse", wh}, nil, ident)
}

// PyIcebergReadREST is PyIcebergRead of a table of the Iceberg REST
// catalog at restURL (http://host:port), its files read from S3 with the
// AWS environment env (S3.Env).
func PyIcebergReadREST(t *testing.T, wh, restURL string, env []string, ident []string) ([]map[string]any, bool) {
	t.Helper()
	_, rows, ok := pyIcebergRead(t, []string{"--warehouse", wh, "--rest", restURL}, env, ident)
	return rows, ok
}

func pyIcebergRead(t *testing.T, args, env []string, ident []string) (map[string]string, []map[string]any, bool) {
	t.Helper()
	py := os.Getenv("TIDEMARK_PYTHON")
	if py == "" {
		return nil, nil, false
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	levels, _ := json.Marshal(ident)
	cmd := exec.Command(py, append(append([]string{filepath.Join(root, "scripts", "pyiceberg_read.py")}, args...), "--ident-json", string(levels))...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("PyIceberg reading %q: %v\n%s", ident, err, stderr.String())
	}
	var res struct {
		Rows  []map[string]any  `json:"rows"`
		Types map[string]string `json:"types"`
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("PyIceberg output: %v\n%s", err, out)
	}
	return res.Types, res.Rows, true
}

// stopGroup stops the process group of a server started by cmd (its own
// group: Setpgid) whose exit closes done: SIGTERM, then SIGKILL after
// grace. It returns at once if the server has exited.
func stopGroup(cmd *exec.Cmd, done <-chan struct{}, grace time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}
