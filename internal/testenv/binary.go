package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var tidemarkBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Tidemark builds cmd/tidemark once per test binary and returns its path,
// for tests that run tidemark as a subprocess (kill -9, exit codes). Main
// removes it.
func Tidemark(t testing.TB) string {
	t.Helper()
	tidemarkBin.once.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			tidemarkBin.err = err
			return
		}
		if tidemarkBin.dir, err = os.MkdirTemp("", "tidemark-test-bin-"); err != nil {
			tidemarkBin.err = err
			return
		}
		tidemarkBin.path = filepath.Join(tidemarkBin.dir, "tidemark")
		cmd := exec.Command("go", "build", "-o", tidemarkBin.path, "./cmd/tidemark")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			tidemarkBin.err = fmt.Errorf("go build ./cmd/tidemark: %v\n%s", err, out)
		}
	})
	if tidemarkBin.err != nil {
		t.Fatal(tidemarkBin.err)
	}
	return tidemarkBin.path
}

func removeTidemark() {
	if tidemarkBin.dir != "" {
		os.RemoveAll(tidemarkBin.dir)
	}
}

// RepoRoot returns the directory holding the module's go.mod.
func RepoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the tidemark module (go env GOMOD = %q)", mod)
	}
	return filepath.Dir(mod), nil
}
