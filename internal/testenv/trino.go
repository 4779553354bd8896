package testenv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A real Trino server (coordinator and worker in one JVM) for `make
// interop`'s tests, started from the io.trino:trino-server tarball's lib/
// and Iceberg plugin that scripts/setup-interop-env.sh unpacks into
// .interop-cache/trino-server-<version>, on a free loopback port, its data
// directory in a temporary directory. Queries go through Trino's HTTP
// statement API (POST /v1/statement, then its nextUri): no client library.
//
// Environment (the Makefile's interop target sets both):
//
//	TIDEMARK_TRINO_HOME   the unpacked server (lib/, plugin/iceberg/)
//	TIDEMARK_TRINO_JAVA   a Java 24+ `java` to run it with

// Trino is a running server.
type Trino struct {
	// URL is the server's http://127.0.0.1:port.
	URL string
	// Startup is how long the server took to accept queries.
	Startup time.Duration
	dir     string
	cmd     *exec.Cmd
	done    chan struct{}
	log     string
}

// StartTrino starts a Trino server with the given catalogs (name ->
// properties file body) and stops it when the test ends. It fails the test
// when TIDEMARK_TRINO_HOME or TIDEMARK_TRINO_JAVA is unset (`make interop`
// sets them) or the server does not start.
func StartTrino(t testing.TB, catalogs map[string]string) *Trino {
	t.Helper()
	home, java := os.Getenv("TIDEMARK_TRINO_HOME"), os.Getenv("TIDEMARK_TRINO_JAVA")
	if home == "" || java == "" {
		t.Fatal("TIDEMARK_TRINO_HOME (trino-server unpacked by scripts/setup-interop-env.sh) and TIDEMARK_TRINO_JAVA (Java 24+) are not set: run `make interop`")
	}
	tr, err := newTrino(home, java, catalogs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Stop(); err != nil {
			t.Errorf("testenv: stop Trino: %v", err)
		}
	})
	return tr
}

func newTrino(home, java string, catalogs map[string]string) (*Trino, error) {
	if _, err := os.Stat(filepath.Join(home, "plugin", "iceberg")); err != nil {
		return nil, fmt.Errorf("testenv: no Trino Iceberg plugin in TIDEMARK_TRINO_HOME=%s (run scripts/setup-interop-env.sh trino): %v", home, err)
	}
	dir, err := os.MkdirTemp("", "tidemark-trino-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	tr := &Trino{URL: fmt.Sprintf("http://127.0.0.1:%d", port), dir: dir, log: filepath.Join(dir, "trino.log"), done: make(chan struct{})}
	if err := os.MkdirAll(filepath.Join(dir, "etc", "catalog"), 0o755); err != nil {
		return nil, err
	}
	config := strings.Join([]string{
		"coordinator=true",
		"node-scheduler.include-coordinator=true",
		"node.environment=tidemark_test",
		"log.enable-console=true",
		"node.bind-ip=127.0.0.1",
		"node.internal-address=127.0.0.1",
		fmt.Sprintf("http-server.http.port=%d", port),
		"discovery.uri=" + tr.URL,
		"plugin.dir=" + filepath.Join(home, "plugin"),
		"catalog.config-dir=" + filepath.Join(dir, "etc", "catalog"),
		"query.max-memory=512MB",
		"query.max-memory-per-node=512MB",
		"",
	}, "\n")
	if err := os.WriteFile(filepath.Join(dir, "etc", "config.properties"), []byte(config), 0o644); err != nil {
		return nil, err
	}
	for name, props := range catalogs {
		if err := os.WriteFile(filepath.Join(dir, "etc", "catalog", name+".properties"), []byte(props), 0o600); err != nil {
			return nil, err
		}
	}
	logf, err := os.Create(tr.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	tr.cmd = exec.Command(java,
		"-Xmx1280m", "-XX:+UseG1GC", "-XX:+ExitOnOutOfMemoryError", "-XX:ReservedCodeCacheSize=256M",
		"-Djdk.attach.allowAttachSelf=true", "-Dfile.encoding=UTF-8", "-Duser.timezone=UTC",
		"-Dconfig="+filepath.Join(dir, "etc", "config.properties"),
		"-cp", filepath.Join(home, "lib", "*"),
		"io.trino.server.TrinoServer")
	tr.cmd.Dir = dir // the server's data directory (var/, as Trino's launcher runs it)
	tr.cmd.Stdout, tr.cmd.Stderr = logf, logf
	tr.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	began := time.Now()
	if err := tr.cmd.Start(); err != nil {
		return nil, fmt.Errorf("testenv: start Trino (%s): %w", java, err)
	}
	go func() { _ = tr.cmd.Wait(); close(tr.done) }()
	if err := tr.waitReady(3 * time.Minute); err != nil {
		_ = tr.Stop()
		return nil, err
	}
	tr.Startup = time.Since(began)
	return tr, nil
}

// waitReady waits until /v1/info says the server has started.
func (tr *Trino) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-tr.done:
			return fmt.Errorf("testenv: Trino exited at start:\n%s", tr.Log())
		default:
		}
		resp, err := http.Get(tr.URL + "/v1/info")
		if err == nil {
			var info struct {
				Starting bool `json:"starting"`
			}
			err = json.NewDecoder(resp.Body).Decode(&info)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && !info.Starting {
				return nil
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("testenv: Trino did not start within %s:\n%s", limit, tr.Log())
}

// TrinoError is a query Trino failed, with its error name and message.
type TrinoError struct {
	Name    string // e.g. TABLE_NOT_FOUND
	Message string
}

func (e *TrinoError) Error() string { return "trino: " + e.Name + ": " + e.Message }

// Query runs one SQL statement and returns its column names and rows, each
// value as Trino's JSON gives it (numbers as json.Number, decimals and
// dates as strings). A failed query is a *TrinoError.
func (tr *Trino) Query(sql string) (cols []string, rows [][]any, err error) {
	req, err := http.NewRequest(http.MethodPost, tr.URL+"/v1/statement", strings.NewReader(sql))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("X-Trino-User", "tidemark")
	req.Header.Set("X-Trino-Time-Zone", "UTC")
	for {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, nil, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, nil, err
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			time.Sleep(50 * time.Millisecond) // "retry", as the protocol says
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return nil, nil, fmt.Errorf("trino: %s: HTTP %d: %s", req.URL, resp.StatusCode, tailOf(string(body), 2000))
		}
		var page struct {
			NextURI string `json:"nextUri"`
			Columns []struct {
				Name string `json:"name"`
			} `json:"columns"`
			Data  [][]any `json:"data"`
			Error *struct {
				Message   string `json:"message"`
				ErrorName string `json:"errorName"`
			} `json:"error"`
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&page); err != nil {
			return nil, nil, fmt.Errorf("trino: response: %w", err)
		}
		if page.Error != nil {
			return nil, nil, &TrinoError{Name: page.Error.ErrorName, Message: page.Error.Message}
		}
		if cols == nil && page.Columns != nil {
			for _, c := range page.Columns {
				cols = append(cols, c.Name)
			}
		}
		rows = append(rows, page.Data...)
		if page.NextURI == "" {
			return cols, rows, nil
		}
		if req, err = http.NewRequest(http.MethodGet, page.NextURI, nil); err != nil {
			return nil, nil, err
		}
		req.Header.Set("X-Trino-User", "tidemark")
	}
}

// Stop stops the server (SIGTERM, then SIGKILL after 30 s) and removes its
// files.
func (tr *Trino) Stop() error {
	stopGroup(tr.cmd, tr.done, 30*time.Second)
	return os.RemoveAll(tr.dir)
}

// Log returns the end of the server's log (for a failing test's message).
func (tr *Trino) Log() string {
	b, _ := os.ReadFile(tr.log)
	return tailOf(string(b), 8000)
}

var _ error = (*TrinoError)(nil)

// IsTrinoError reports whether err is a failed Trino query named name.
func IsTrinoError(err error, name string) bool {
	var te *TrinoError
	return errors.As(err, &te) && te.Name == name
}
