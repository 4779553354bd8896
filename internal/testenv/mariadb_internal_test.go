package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReapStaleMariaDB: a directory whose lock nobody holds is removed; one
// whose lock is held (its owner lives, maybe in another PID namespace) and
// one without a lock (being created) are kept.
func TestReapStaleMariaDB(t *testing.T) {
	base := t.TempDir()
	mk := func(name string, withLock bool) string {
		dir := filepath.Join(base, mariadbDirPrefix+name)
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if withLock {
			if err := os.WriteFile(filepath.Join(dir, "lock"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	stale := mk("stale", true)
	live := mk("live", true)
	creating := mk("creating", false)
	held, err := lockDir(live)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	reapStaleMariaDB(base)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale directory kept: %v", err)
	}
	for _, d := range []string{live, creating} {
		if _, err := os.Stat(filepath.Join(d, "data")); err != nil {
			t.Errorf("%s removed: %v", d, err)
		}
	}
}
