package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/tidemark/tidemark/internal/config"
)

func newFlags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("tidemark", pflag.ContinueOnError)
	var c config.Config
	c.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	return fs
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tidemark.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFlagPrecedence(t *testing.T) {
	file := writeFile(t, `
source: postgres://app@db/shop
warehouse: /from/file
commit_interval: 5s
snapshot:
  parallelism: 8
  enabled: false
tables: [public.a, public.b]
log:
  level: debug
`)
	tests := []struct {
		name  string
		args  []string
		check func(t *testing.T, c *config.Config)
	}{
		{"file only", nil, func(t *testing.T, c *config.Config) {
			eq(t, "warehouse", c.Warehouse, "/from/file")
			eq(t, "commit_interval", c.CommitInterval.Std(), 5*time.Second)
			eq(t, "parallelism", c.Snapshot.Parallelism, 8)
			eq(t, "enabled", c.Snapshot.IsEnabled(), false)
			eq(t, "tables", strings.Join(c.Tables, ","), "public.a,public.b")
			eq(t, "log.level", c.Log.Level, "debug")
			eq(t, "heartbeat (default)", c.HeartbeatInterval.Std(), time.Second)
		}},
		{"flags override file", []string{
			"--commit-interval=2s", "--warehouse", "/from/flag", "--snapshot-enabled",
			"--tables", `public.c,"x,y"."Z"`, "--tables", "public.d",
			"--commit-bytes", "1GiB", "--memory-budget", "4GiB", "--source", "postgres://other@db2/orders",
		}, func(t *testing.T, c *config.Config) {
			eq(t, "warehouse", c.Warehouse, "/from/flag")
			eq(t, "commit_interval", c.CommitInterval.Std(), 2*time.Second)
			eq(t, "enabled", c.Snapshot.IsEnabled(), true)
			eq(t, "tables", strings.Join(c.Tables, "|"), `public.c|"x,y"."Z"|public.d`)
			eq(t, "commit_bytes", c.CommitBytes, config.GiB)
			eq(t, "memory_budget", c.MemoryBudget, 4*config.GiB)
			// chunk_bytes not set: its default, a sixteenth of the budget,
			// but no more than what is left of half the budget for 8 workers.
			eq(t, "snapshot.chunk_bytes (derived)", c.Snapshot.ChunkBytes, 128*config.MiB)
			eq(t, "source", c.Source.Reveal(), "postgres://other@db2/orders")
			eq(t, "name (from flag source)", c.Name, "orders")
			// Not given as flags: the file's values stand, not the defaults.
			eq(t, "parallelism", c.Snapshot.Parallelism, 8)
			eq(t, "log.level", c.Log.Level, "debug")
		}},
		{"flag false", []string{"--snapshot-enabled=false", "--log-level", "warn"}, func(t *testing.T, c *config.Config) {
			eq(t, "enabled", c.Snapshot.IsEnabled(), false)
			eq(t, "log.level", c.Log.Level, "warn")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Resolve(newFlags(t, tt.args...), file)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestFlagsWithoutFile(t *testing.T) {
	c, err := config.Resolve(newFlags(t, "--source", "postgres://u@h/shop", "--snapshot-parallelism", "4", "--retry-max-elapsed", "1h"), "")
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "parallelism", c.Snapshot.Parallelism, 4)
	eq(t, "max_elapsed", c.Retry.MaxElapsed.Std(), time.Hour)
	eq(t, "commit_interval (default)", c.CommitInterval.Std(), 500*time.Millisecond)
	eq(t, "warehouse (default)", c.Warehouse, "./lake")
}

func TestFlagErrorsNameTheFlag(t *testing.T) {
	file := writeFile(t, "source: postgres://u@h/shop\nsnapshot:\n  parallelism: 4\n")
	_, err := config.Resolve(newFlags(t, "--snapshot-parallelism=0"), file)
	want := "config: snapshot.parallelism: must be between 1 and 64, got 0 (set by --snapshot-parallelism)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

func TestFlagParseErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--commit-interval", "5"},
		{"--commit-bytes", "lots"},
		{"--snapshot-parallelism", "two"},
		{"--snapshot-enabled=maybe"},
	} {
		fs := pflag.NewFlagSet("tidemark", pflag.ContinueOnError)
		fs.SetOutput(new(strings.Builder))
		var c config.Config
		c.BindFlags(fs)
		if err := fs.Parse(args); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

func TestFlagHelpShowsDefaults(t *testing.T) {
	fs := pflag.NewFlagSet("tidemark", pflag.ContinueOnError)
	var c config.Config
	c.BindFlags(fs)
	usage := fs.FlagUsages()
	for _, want := range []string{
		"--commit-interval duration", "(default 1s)",
		"--memory-budget bytes", "(default 256MiB)",
		"--commit-bytes bytes", "(default: memory-budget/16)",
		"--snapshot-enabled", "(default true)",
		"--snapshot-parallelism int", "(default 2)",
		"--retry-max-elapsed duration", "(default 10m0s)",
		"--source url", "--tables strings",
	} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage lacks %q:\n%s", want, usage)
		}
	}
}

func TestFlagTableErrorNamesTheFlag(t *testing.T) {
	_, err := config.Resolve(newFlags(t, "--source", "postgres://u@h/shop", "--tables", "public.a,users"), "")
	want := `config: tables[1]: missing schema in "users"`
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "(set by --tables)") {
		t.Fatalf("got %v, want %s ... (set by --tables)", err, want)
	}
}

// TestFlagsOverrideSourceBlock: --source, --slot and --publication override
// the typed source block as they do the top-level keys; a --source of
// another kind than source.type is named.
func TestFlagsOverrideSourceBlock(t *testing.T) {
	file := writeFile(t, `
source:
  type: postgres
  url: postgres://app@db/shop
  slot: file_slot
  publication: file_pub
`)
	c, err := config.Resolve(newFlags(t, "--slot", "flag_slot"), file)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "slot", c.Slot, "flag_slot")
	eq(t, "publication", c.Publication, "file_pub")
	eq(t, "source", c.Source.Reveal(), "postgres://app@db/shop")
	c, err = config.Resolve(newFlags(t, "--source", "postgres://other@db2/orders", "--publication", "flag_pub"), file)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "source", c.Source.Reveal(), "postgres://other@db2/orders")
	eq(t, "publication", c.Publication, "flag_pub")
	_, err = config.Resolve(newFlags(t, "--source", "mysql://app@db/shop", "--slot", "x"), writeFile(t, "source:\n  type: postgres\n"))
	if err == nil || !strings.Contains(err.Error(), "source.type: is postgres, but the source connection string is a mysql one") {
		t.Errorf("type mismatch with --source: %v", err)
	}
}

// TestTimeAsFlag: --time-as takes the values of time_as, over the file's,
// and any other value is a bad_config error naming the key, the flag and
// the values allowed.
func TestTimeAsFlag(t *testing.T) {
	file := writeFile(t, "source: postgres://u@h/shop\ntime_as: micros\n")
	c, err := config.Resolve(newFlags(t), file)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "time_as (file)", c.TimeAs, "micros")
	c, err = config.Resolve(newFlags(t, "--time-as", "text"), file)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "time_as (flag)", c.TimeAs, "text")
	_, err = config.Resolve(newFlags(t, "--time-as=string"), file)
	want := `config: time_as: must be one of time, text, micros, got "string" (set by --time-as)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Path != "time_as" {
		t.Errorf("error is not a *config.Error of time_as (exit 2, as every bad setting): %#v", err)
	}
}
