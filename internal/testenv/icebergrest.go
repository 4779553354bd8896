package testenv

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A real Iceberg REST catalog for tests: Apache Iceberg's reference
// server (org.apache.iceberg.rest.RESTCatalogServer's adapter, from
// org.apache.iceberg:iceberg-open-api:<v>:test-fixtures), backed by a
// JdbcCatalog in a SQLite file and S3FileIO, started from the jars
// scripts/setup-test-env.sh puts in .test-cache/iceberg-rest/lib with
// the small launcher it compiles there (icebergrest/LoopbackRESTCatalogServer.java:
// the fixture's main binds every interface; the launcher binds
// 127.0.0.1), on a free loopback port.
//
// Environment:
//
//	TIDEMARK_ICEBERG_REST_LIBS     the jar directory (default .test-cache/iceberg-rest/lib)
//	TIDEMARK_REQUIRE_ICEBERG_REST  "1": missing jars fail the test instead of skipping it

// ErrNoRESTCatalog reports that the REST catalog's jars (or java) were not found.
var ErrNoRESTCatalog = errors.New("testenv: the Iceberg REST catalog's jars or java not found (run scripts/setup-test-env.sh; TIDEMARK_ICEBERG_REST_LIBS)")

// RESTCatalog is a running REST catalog server.
type RESTCatalog struct {
	// URL is the catalog's base URL, http://127.0.0.1:port.
	URL  string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// restLibs returns the jar directory (holding the compiled launcher in
// classes/ beside it), or ErrNoRESTCatalog.
func restLibs() (string, error) {
	dir := os.Getenv("TIDEMARK_ICEBERG_REST_LIBS")
	if dir == "" {
		if root, err := RepoRoot(); err == nil {
			dir = filepath.Join(root, ".test-cache", "iceberg-rest", "lib")
		}
	}
	jars, _ := filepath.Glob(filepath.Join(dir, "iceberg-open-api-*-test-fixtures.jar"))
	if len(jars) == 0 {
		return "", fmt.Errorf("%w: no iceberg-open-api test-fixtures jar in %q", ErrNoRESTCatalog, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "..", "classes", "org", "apache", "iceberg", "rest", "LoopbackRESTCatalogServer.class")); err != nil {
		return "", fmt.Errorf("%w: the launcher is not compiled in %q", ErrNoRESTCatalog, filepath.Join(dir, "..", "classes"))
	}
	if _, err := exec.LookPath("java"); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoRESTCatalog, err)
	}
	return dir, nil
}

// StartRESTCatalog starts a REST catalog whose tables live in the
// warehouse (an s3:// URL of store, or a local directory when store is
// nil) and stops it when the test ends. Without the jars the test is
// skipped, unless TIDEMARK_REQUIRE_ICEBERG_REST=1.
func StartRESTCatalog(t testing.TB, store *S3, warehouse string) *RESTCatalog {
	t.Helper()
	c, err := NewRESTCatalog(store, warehouse)
	if err != nil {
		if errors.Is(err, ErrNoRESTCatalog) && os.Getenv("TIDEMARK_REQUIRE_ICEBERG_REST") != "1" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("testenv: stop the REST catalog: %v", err)
		}
	})
	return c
}

// NewRESTCatalog starts a REST catalog (see StartRESTCatalog); Stop stops
// it and removes its files.
func NewRESTCatalog(store *S3, warehouse string) (*RESTCatalog, error) {
	libs, err := restLibs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tidemark-iceberg-rest-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &RESTCatalog{URL: fmt.Sprintf("http://127.0.0.1:%d", port), dir: dir, log: filepath.Join(dir, "rest.log")}
	// RCKUtils.environmentCatalogConfig: CATALOG_<KEY> is the catalog
	// property <key> with "__" for '-' and "_" for '.'.
	env := append(os.Environ(),
		"CATALOG_WAREHOUSE="+warehouse,
		"CATALOG_URI=jdbc:sqlite:"+filepath.Join(dir, "catalog.db"),
		"CATALOG_JDBC_USER=user", "CATALOG_JDBC_PASSWORD=password",
	)
	if store != nil {
		env = append(env,
			"CATALOG_IO__IMPL=org.apache.iceberg.aws.s3.S3FileIO",
			"CATALOG_S3_ENDPOINT="+store.Endpoint,
			"CATALOG_S3_PATH__STYLE__ACCESS=true",
			"CATALOG_S3_ACCESS__KEY__ID="+store.AccessKey,
			"CATALOG_S3_SECRET__ACCESS__KEY="+store.SecretKey,
			"CATALOG_CLIENT_REGION="+store.Region,
			"AWS_REGION="+store.Region,
		)
	}
	logf, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cp := filepath.Join(libs, "..", "classes") + string(os.PathListSeparator) + filepath.Join(libs, "*")
	c.cmd = exec.Command("java", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp,
		"org.apache.iceberg.rest.LoopbackRESTCatalogServer", strconv.Itoa(port))
	c.cmd.Env = env
	c.cmd.Dir = dir
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.done = make(chan struct{})
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testenv: start the REST catalog: %w", err)
	}
	go func() {
		c.cmd.Wait()
		logf.Close()
		close(c.done)
	}()
	if err := c.waitReady(2 * time.Minute); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// waitReady waits until GET /v1/config answers.
func (c *RESTCatalog) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	cl := &http.Client{Timeout: 3 * time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-c.done:
			return fmt.Errorf("testenv: the REST catalog exited at start:\n%s", c.Log())
		default:
		}
		if resp, err := cl.Get(c.URL + "/v1/config"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), "defaults") {
				return nil
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	return fmt.Errorf("testenv: the REST catalog did not start within %s:\n%s", limit, c.Log())
}

// Stop stops the server and removes its files.
func (c *RESTCatalog) Stop() error {
	stopGroup(c.cmd, c.done, 20*time.Second)
	return os.RemoveAll(c.dir)
}

// Log returns the end of the server's log (for a failing test's message).
func (c *RESTCatalog) Log() string {
	b, _ := os.ReadFile(c.log)
	return tailOf(string(b), 6000)
}
