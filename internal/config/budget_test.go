package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/tidemark/tidemark/internal/config"
)

// TestMemoryBudget checks memory_budget: the buffers' defaults are shares
// of it, and settings that do not fit are errors naming the keys.
func TestMemoryBudget(t *testing.T) {
	const src = "--source=postgres://u@h/shop"
	good := []struct {
		name                  string
		args                  []string
		budget, commit, chunk config.ByteSize
	}{
		{"defaults", nil, 256 * config.MiB, 16 * config.MiB, 16 * config.MiB},
		{"a larger budget scales the buffers", []string{"--memory-budget", "1GiB"}, config.GiB, 64 * config.MiB, 64 * config.MiB},
		{"the smallest budget", []string{"--memory-budget", "64MiB"}, 64 * config.MiB, 4 * config.MiB, 4 * config.MiB},
		{"many workers share the chunk room", []string{"--snapshot-parallelism", "32"}, 256 * config.MiB, 16 * config.MiB, 3584 * config.KiB},
		{"explicit values that fit exactly", []string{"--commit-bytes", "64MiB", "--snapshot-chunk-bytes", "32MiB"}, 256 * config.MiB, 64 * config.MiB, 32 * config.MiB},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Resolve(newFlags(t, append([]string{src}, tc.args...)...), "")
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "memory_budget", c.MemoryBudget, tc.budget)
			eq(t, "commit_bytes", c.CommitBytes, tc.commit)
			eq(t, "snapshot.chunk_bytes", c.Snapshot.ChunkBytes, tc.chunk)
			if need := c.CommitBytes + config.ByteSize(c.Snapshot.Parallelism)*c.Snapshot.ChunkBytes; need > c.MemoryBudget/2 {
				t.Errorf("buffers %s do not fit in half of memory_budget %s", need, c.MemoryBudget)
			}
		})
	}

	bad := []struct {
		name string
		args []string
		want []string // substrings of the error
	}{
		{"too small", []string{"--memory-budget", "16MiB"},
			[]string{"config: memory_budget: must be at least 64MiB, got 16MiB (set by --memory-budget)"}},
		{"zero", []string{"--memory-budget", "0"},
			[]string{"memory_budget: must be at least 64MiB, got 0B"}},
		{"commit_bytes too big for the default budget", []string{"--commit-bytes", "200MiB"},
			[]string{"config: commit_bytes: the buffers do not fit in memory_budget: commit_bytes (200MiB) + snapshot.parallelism (2) × snapshot.chunk_bytes (1MiB) = 202MiB, more than half of memory_budget (256MiB)",
				"raise memory_budget to at least 404MiB", "(set by --commit-bytes)"}},
		{"chunks too big for a small budget", []string{"--memory-budget", "100MiB", "--snapshot-chunk-bytes", "32MiB"},
			[]string{"snapshot.chunk_bytes: the buffers do not fit in memory_budget: commit_bytes (6400KiB) + snapshot.parallelism (2) × snapshot.chunk_bytes (32MiB)",
				"(set by --snapshot-chunk-bytes)"}},
		{"too many workers for the smallest chunks", []string{"--memory-budget", "64MiB", "--snapshot-parallelism", "64"},
			[]string{"snapshot.parallelism: the buffers do not fit in memory_budget: commit_bytes (4MiB) + snapshot.parallelism (64) × snapshot.chunk_bytes (1MiB) = 68MiB", "raise memory_budget to at least 136MiB"}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Resolve(newFlags(t, append([]string{src}, tc.args...)...), "")
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q; got:\n%v", w, err)
				}
			}
		})
	}

	t.Run("unparsable", func(t *testing.T) {
		fs := pflag.NewFlagSet("tidemark", pflag.ContinueOnError)
		var c config.Config
		c.BindFlags(fs)
		err := fs.Parse([]string{"--memory-budget", "lots"})
		if err == nil || !strings.Contains(err.Error(), "memory-budget") {
			t.Fatalf("got %v, want an error naming --memory-budget", err)
		}
	})

	t.Run("from a file, with its line", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "tidemark.yml")
		if err := os.WriteFile(path, []byte("source: postgres://u@h/shop\nmemory_budget: 128MiB\ncommit_bytes: 64MiB\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := loadAndValidate(path)
		want := path + ":3: commit_bytes: the buffers do not fit in memory_budget: commit_bytes (64MiB) + snapshot.parallelism (2) × snapshot.chunk_bytes (1MiB) = 66MiB, more than half of memory_budget (128MiB)"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want %s", err, want)
		}
	})
}
