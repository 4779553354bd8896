package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/config"
)

const canary = "Canary-P@ss-7f3"

// setTestEnv sets the variables the testdata files refer to.
func setTestEnv(t *testing.T) {
	t.Setenv("TM_TEST_HOST", "db.example.com")
	t.Setenv("TM_TEST_PASSWORD", canary)
	t.Setenv("TM_TEST_TABLES", `public.a, "x,y"."Z"`)
	t.Setenv("TM_TEST_EMPTY", "")
	for _, v := range []string{"TM_TEST_DB", "TM_TEST_UNSET", "TM_TEST_MISSING", "TM_TEST_ALSO_MISSING", "TM_TEST_NOT_SET_IN_COMMENT"} {
		os.Unsetenv(v) // t.Setenv above restores the environment; these must be absent
	}
}

// loadAndValidate is what a command does with a file and no flags.
func loadAndValidate(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	return cfg, cfg.Validate()
}

func TestGoodFiles(t *testing.T) {
	setTestEnv(t)
	tests := map[string]func(t *testing.T, c *config.Config){
		"minimal.good.yml": func(t *testing.T, c *config.Config) {
			eq(t, "name", c.Name, "shop") // lowercased database name
			eq(t, "warehouse", c.Warehouse, "./lake")
			eq(t, "publication", c.Publication, "tidemark_shop")
			eq(t, "slot", c.Slot, "tidemark_shop")
			eq(t, "spool_dir", c.SpoolDir, filepath.Join("lake", "_tidemark", "spool"))
			eq(t, "commit_interval", c.CommitInterval.Std(), 500*time.Millisecond)
			eq(t, "commit_bytes (memory_budget/16)", c.CommitBytes, 16*config.MiB)
			eq(t, "memory_budget", c.MemoryBudget, 256*config.MiB)
			eq(t, "heartbeat_interval", c.HeartbeatInterval.Std(), time.Second)
			eq(t, "publication_poll", c.PublicationPoll.Std(), 10*time.Second)
			eq(t, "snapshot.enabled", c.Snapshot.IsEnabled(), true)
			eq(t, "snapshot.parallelism", c.Snapshot.Parallelism, 2)
			eq(t, "snapshot.chunk_rows", c.Snapshot.ChunkRows, 100000)
			eq(t, "snapshot.chunk_bytes (memory_budget/16)", c.Snapshot.ChunkBytes, 16*config.MiB)
			eq(t, "retry.initial_backoff", c.Retry.InitialBackoff.Std(), 500*time.Millisecond)
			eq(t, "retry.max_backoff", c.Retry.MaxBackoff.Std(), 30*time.Second)
			eq(t, "retry.max_elapsed", c.Retry.MaxElapsed.Std(), 10*time.Minute)
			eq(t, "log.level", c.Log.Level, "info")
			eq(t, "log.format", c.Log.Format, "text")
			eq(t, "catalog", c.Catalog.IsZero(), true)
			eq(t, "metrics_addr", c.MetricsAddr, "")
			eq(t, "time_as", c.TimeAs, "time")
			eq(t, "tables", len(c.Tables), 0)
			eq(t, "lake.format", c.Lake.Format, "iceberg")
		},
		"s3_rest.good.yml": func(t *testing.T, c *config.Config) {
			eq(t, "warehouse (normalized)", c.Warehouse, "s3://lake/shop")
			eq(t, "catalog", c.Catalog.Reveal(), "rest+https://tidemark:"+canary+"@catalog.internal:8181/api/catalog?warehouse=shop")
			if strings.Contains(c.String(), canary) {
				t.Errorf("the config's printed form shows the REST catalog's secret: %s", c.String())
			}
			if strings.HasPrefix(c.SpoolDir, "s3:") || !filepath.IsAbs(c.SpoolDir) {
				t.Errorf("spool_dir %q: want a local absolute directory with an S3 warehouse", c.SpoolDir)
			}
		},
		"lake_delta.good.yml": func(t *testing.T, c *config.Config) {
			eq(t, "lake.format", c.Lake.Format, "delta")
			eq(t, "time_as (Delta has no time type)", c.TimeAs, "micros")
		},
		"full.good.yml": func(t *testing.T, c *config.Config) {
			eq(t, "source", c.Source.Reveal(), "postgres://app:secret@db.example.com:5432/shop?sslmode=require")
			eq(t, "name", c.Name, "shop_eu")
			eq(t, "warehouse", c.Warehouse, "/data/lake")
			eq(t, "catalog", c.Catalog.Reveal(), "postgres://iceberg:secret@catalog.example.com/iceberg")
			eq(t, "publication", c.Publication, "shop_pub")
			eq(t, "slot", c.Slot, "shop_slot")
			eq(t, "tables", strings.Join(c.Tables, "|"), `public.orders|"Sales EU"."LineItems"`)
			names, err := c.TableNames()
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "tables[1] schema", names[1].Schema, "Sales EU")
			eq(t, "tables[1] table", names[1].Table, "LineItems")
			eq(t, "commit_interval", c.CommitInterval.Std(), 5*time.Second)
			eq(t, "commit_bytes", c.CommitBytes, 128*config.MiB)
			eq(t, "memory_budget", c.MemoryBudget, config.GiB)
			eq(t, "max_value_bytes", c.MaxValueBytes, 100*config.MiB)
			eq(t, "heartbeat_interval", c.HeartbeatInterval.Std(), 2*time.Second)
			eq(t, "publication_poll", c.PublicationPoll.Std(), 30*time.Second)
			eq(t, "snapshot.enabled", c.Snapshot.IsEnabled(), false)
			eq(t, "snapshot.parallelism", c.Snapshot.Parallelism, 8)
			eq(t, "snapshot.chunk_rows", c.Snapshot.ChunkRows, 50000)
			eq(t, "snapshot.chunk_bytes", c.Snapshot.ChunkBytes, config.ByteSize(16_000_000))
			eq(t, "retry.initial_backoff", c.Retry.InitialBackoff.Std(), 250*time.Millisecond)
			eq(t, "retry.max_backoff", c.Retry.MaxBackoff.Std(), time.Minute)
			eq(t, "retry.max_elapsed", c.Retry.MaxElapsed.Std(), time.Hour)
			eq(t, "log.level", c.Log.Level, "debug") // normalised
			eq(t, "log.format", c.Log.Format, "json")
			eq(t, "metrics_addr", c.MetricsAddr, "127.0.0.1:9187")
			eq(t, "spool_dir", c.SpoolDir, "/var/spool/tidemark")
		},
		"interpolation.good.yml": func(t *testing.T, c *config.Config) {
			eq(t, "source", c.Source.Reveal(), "postgres://app:"+canary+"@db.example.com:5432/inventory")
			eq(t, "name", c.Name, "inventory")                  // from ${TM_TEST_DB:-inventory}
			eq(t, "warehouse", c.Warehouse, "/srv/lake")        // ${TM_TEST_UNSET:-/srv/lake}
			eq(t, "metrics_addr", c.MetricsAddr, ":9090")       // :- also replaces an empty value
			eq(t, "log.level", c.Log.Level, "info")             // ${TM_TEST_EMPTY} is "", so the default
			eq(t, "spool_dir", c.SpoolDir, "/spool/${HOME}/x$") // $$ is a literal $
			eq(t, "tables", strings.Join(c.Tables, "|"), `public.a|"x,y"."Z"`)
			if strings.Contains(c.String(), canary) {
				t.Errorf("String() shows the interpolated password: %s", c)
			}
		},
		"gold.good.yml": func(t *testing.T, c *config.Config) {
			if len(c.Gold) != 2 {
				t.Fatalf("gold: %d tables, want 2", len(c.Gold))
			}
			eq(t, "gold[0].name", c.Gold[0].Name, "per_customer")
			eq(t, "gold[0].every", c.Gold[0].EveryString(), config.GoldEveryAfterMerge)
			eq(t, "gold[1].every", c.Gold[1].EveryString(), "1m0s")
			if !strings.Contains(c.Gold[1].SQL, "FROM silver.public.orders GROUP BY 1") {
				t.Errorf("gold[1].sql = %q", c.Gold[1].SQL)
			}
		},
		"merge_keys.good.yml": func(t *testing.T, c *config.Config) {
			keys, err := c.MergeKeys.Parsed()
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "merge_keys[public.events]", strings.Join(keys[config.TableName{Schema: "public", Table: "events"}], "|"), "tenant|event_id")
			eq(t, `merge_keys["Sales"."Orders"]`, strings.Join(keys[config.TableName{Schema: "Sales", Table: "Orders"}], "|"), "order_no|line")
		},
		"source_block.good.yml": func(t *testing.T, c *config.Config) {
			eq(t, "source.url", c.Source.Reveal(), "postgres://app:secret@db.example.com:5432/Shop")
			eq(t, "source.slot", c.Slot, "shop_slot")
			eq(t, "source.publication", c.Publication, "shop_pub")
			eq(t, "name", c.Name, "shop")
			eq(t, "type", c.SourceType(), config.SourcePostgres)
		},
		"source_block_mysql.good.yml": func(t *testing.T, c *config.Config) {
			eq(t, "source.url", c.Source.Reveal(), "mysql://app:secret@db.example.com:3306/shop")
			eq(t, "type", c.SourceType(), config.SourceMySQL)
		},
		"anchors.good.yml": func(t *testing.T, c *config.Config) {
			eq(t, "snapshot.parallelism", c.Snapshot.Parallelism, 4) // merged from x-snapshot
			eq(t, "snapshot.chunk_rows", c.Snapshot.ChunkRows, 500)  // explicit key wins
		},
	}
	checkAllListed(t, "*.good.yml", tests)
	for file, check := range tests {
		t.Run(file, func(t *testing.T) {
			cfg, err := loadAndValidate(filepath.Join("testdata", file))
			if err != nil {
				t.Fatalf("unexpected error:\n%v", err)
			}
			check(t, cfg)
			// Validate is idempotent.
			before := cfg.String()
			if err := cfg.Validate(); err != nil || cfg.String() != before {
				t.Errorf("second Validate changed the config or failed: %v", err)
			}
		})
	}
}

func TestBadFiles(t *testing.T) {
	setTestEnv(t)
	tests := map[string][]string{
		"unknown_key.bad.yml": {
			`unknown_key.bad.yml:3: snapshot.paralelism: unknown key; did you mean "parallelism"?`,
			`unknown_key.bad.yml:4: commit-interval: unknown key; did you mean "commit_interval"?`,
		},
		"mysql_top_slot.bad.yml": {"mysql_top_slot.bad.yml:4: slot: is a PostgreSQL setting; a MySQL source has no slot: remove the key (the binlog reader's identity is mysql.server_id)"},
		"unknown_top.bad.yml":    {`unknown_top.bad.yml:1: sorce: unknown key; did you mean "source"?`},
		"wrong_level.bad.yml":    {`wrong_level.bad.yml:2: parallelism: unknown key; did you mean snapshot.parallelism?`},
		"bad_duration.bad.yml": {
			`bad_duration.bad.yml:2: commit_interval: invalid duration "5": missing unit`,
			`bad_duration.bad.yml:4: retry.max_backoff: invalid duration "10 minutes"`,
		},
		"bad_bytesize.bad.yml": {
			`bad_bytesize.bad.yml:2: commit_bytes: invalid byte size "64MB/s": unknown unit "MB/s"`,
			`bad_bytesize.bad.yml:4: snapshot.chunk_bytes: invalid byte size "-1MiB": must not be negative`,
		},
		"bad_parallelism.bad.yml": {`bad_parallelism.bad.yml:3: snapshot.parallelism: must be between 1 and 64, got 0`},
		"bad_types.bad.yml": {
			`:3: snapshot.chunk_rows: must be a whole number, got "many"`,
			`:4: snapshot.enabled: must be true or false, got "maybe"`,
			`:6: tables: expected a list, got a mapping`,
			`:7: log: expected a mapping of keys, got a scalar`,
		},
		"bad_source.bad.yml": {
			`bad_source.bad.yml:1: source: not a valid PostgreSQL URL (postgres://app:xxxxx@[::1/shop): IPv6 host is missing its closing ']'; expected postgres://user:password@host:port/database`,
			`bad_source.bad.yml:2: catalog: key=value connection strings are not accepted here`,
		},
		"source_block.bad.yml": {
			`source_block.bad.yml:3: source.type: must be one of [postgres mysql], got "oracle"`,
			`source_block.bad.yml:5: source.slot: set twice: here and as the top-level slot: (line 1); keep source.slot (the top-level key is deprecated)`,
			`source_block.bad.yml:6: source.slott: unknown key; did you mean "slot"?`,
		},
		"source_block_type.bad.yml": {
			`source_block_type.bad.yml:4: source.publication: is a PostgreSQL setting; a source of type: mysql has no publication`,
		},
		"source_type_mismatch.bad.yml": {
			`source_type_mismatch.bad.yml:3: source.type: is mysql, but the source connection string is a postgres one`,
		},
		"missing_env.bad.yml": {
			`missing_env.bad.yml:2: environment variable TM_TEST_MISSING is not set`,
			`missing_env.bad.yml:3: environment variable TM_TEST_ALSO_MISSING is not set`,
		},
		"bad_reference.bad.yml": {
			`bad_reference.bad.yml:2: invalid variable reference`,
			`bad_reference.bad.yml:3: unterminated "${"`,
		},
		"bad_lake_format.bad.yml": {`bad_lake_format.bad.yml:3: lake.format: must be iceberg or delta, got "hudi"`},
		"bad_lake_delta.bad.yml": {
			`bad_lake_delta.bad.yml:2: catalog: must be empty with lake.format: delta`,
			`bad_lake_delta.bad.yml:3: time_as: must be micros or text with lake.format: delta (Delta has no time-of-day type), got "time"`,
		},
		"bad_s3.bad.yml": {
			`catalog: required with an s3:// warehouse`,
			`bad_s3.bad.yml:4: lake.format: delta cannot write an s3:// warehouse yet`,
		},
		"bad_s3_url.bad.yml": {
			`bad_s3_url.bad.yml:2: warehouse: s3://lake…: must not hold credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY`,
			`bad_s3_url.bad.yml:3: catalog: the REST catalog URL has an unknown parameter "token" (only warehouse= is known)`,
		},
		"bad_time_as.bad.yml":   {`bad_time_as.bad.yml:2: time_as: must be one of time, text, micros, got "microseconds"`},
		"duplicate_key.bad.yml": {`duplicate_key.bad.yml:4: log.level: duplicate key (first set on line 3)`},
		"bad_gold.bad.yml": {
			`:3: gold[0].name: must match ^[a-z_][a-z0-9_]*$`,
			`:7: gold[2].name: twice is declared twice (also gold[1])`,
			`:7: gold[2].sql: required: one SELECT over this source's silver tables`,
			`:9: gold[3].name: required`,
			`:9: gold[3].every: must be at least 1s or after_each_silver_merge, got 10ms`,
		},
		"bad_gold_every.bad.yml": {
			`gold[0].every: want a duration (30s, 5m, 1h) or after_each_silver_merge, got "sometimes"`,
		},
		"bad_merge_keys.bad.yml": {
			`merge_keys["events"]: missing schema in "events"`,
			`merge_keys["public.empty"]: public.empty: list at least one column`,
			`merge_keys["public.twice"]: public.twice: column "a" is listed twice`,
			`merge_keys["public.dup"]: public.dup is the table merge_keys["Public.Dup"] names too`,
		},
		"bad_tables.bad.yml": {
			`:3: tables[0]: missing schema in "users" (did you mean "public.users"?)`,
			`:4: tables[1]: too many dots in "a.b.c"`,
			`:5: tables[2]: wildcards are not supported`,
			`:7: tables[4]: public.orders is listed twice (also tables[3])`, // Public.Orders folds to public.orders
			`:8: tables[5]: unterminated double quote`,
		},
		"bad_silver.bad.yml": {
			`:3: silver.every: must be at least 100ms, got 10ms`,
			`:4: silver.buckets: must be between 0 (unpartitioned) and 4096, got 5000`,
			`:5: silver.delete_mode: must be merge-on-read or copy-on-write, got "cow"`,
			`:6: silver.max_changes: must be at least 1000, got 10`,
			`:7: heartbeat_interval: must be at least 10ms, got 1ms`,
			`:8: publication_poll: must be at least 100ms, got 10ms`,
			`:10: snapshot.chunk_rows: must be at least 1, got 0`,
			`:11: snapshot.chunk_bytes: the buffers do not fit in memory_budget: commit_bytes (16MiB) + snapshot.parallelism (2) × snapshot.chunk_bytes (1GiB) = 2064MiB, more than half of memory_budget (256MiB)`,
			`:13: retry.initial_backoff: must be at least 1ms, got 0s`,
			`:14: metrics_addr: port must be a number between 0 and 65535`,
		},
		"bad_drop_column.bad.yml": {`bad_drop_column.bad.yml:3: silver.drop_column: must be keep or drop, got "remove"`},
		"bad_nested.bad.yml": {
			`:3: silver.evry: unknown key; did you mean "every"?`,
			`:4: silver.soft_deletes: must be true or false, got "perhaps"`,
			`:6: retry.max_elapsed_time: unknown key`,
			`:8: log.levle: unknown key; did you mean "level"?`,
		},
		"bad_yaml.bad.yml":    {`bad_yaml.bad.yml:3: invalid YAML: did not find expected key`},
		"not_mapping.bad.yml": {`not_mapping.bad.yml:1: the top level must be a mapping`},
		"no_source.bad.yml":   {`config: source: required`},
		"bad_values.bad.yml": {
			`:1: name: not set, and the source database name "My-Shop" cannot be used as one (lowercased, it must match ^[a-z_][a-z0-9_]*$); set name: in the config file or pass --name`,
			`:2: warehouse: must not be empty`,
			`:3: commit_interval: must be at least 10ms, got 1ms`,
			`:4: commit_bytes: the buffers do not fit in memory_budget: commit_bytes (512MiB) + snapshot.parallelism (2) × snapshot.chunk_bytes (1MiB) = 514MiB, more than half of memory_budget (256MiB); `,
			`:6: publication: must match`,
			`:7: slot: must match [a-z0-9_]{1,63}`,
			`:10: retry.max_backoff: must be at least retry.initial_backoff (2s), got 1s`,
			`:12: log.level: must be one of debug, info, warn, error; got "verbose"`,
			`:13: log.format: must be text or json; got "xml"`,
			`:14: metrics_addr: must be host:port`,
		},
	}
	checkAllListed(t, "*.bad.yml", tests)
	for file, want := range tests {
		t.Run(file, func(t *testing.T) {
			_, err := loadAndValidate(filepath.Join("testdata", file))
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, w := range want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q; got:\n%s", w, msg)
				}
			}
			if got, n := strings.Count(msg, "\n")+1, len(want); got != n {
				t.Errorf("got %d problems, want %d:\n%s", got, n, msg)
			}
			if strings.Contains(msg, canary) {
				t.Errorf("error shows the password:\n%s", msg)
			}
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Errorf("error is not a *config.Error: %T", err)
			}
		})
	}
}

// checkAllListed fails if a testdata file matching pattern has no entry.
func checkAllListed[V any](t *testing.T, pattern string, tests map[string]V) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", pattern))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := tests[filepath.Base(f)]; !ok {
			t.Errorf("%s has no entry in the test table", f)
		}
	}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := config.Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v, want a not-exist error", err)
	}
}

func TestEmptyFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(p, []byte("# nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "source: required") {
		t.Fatalf("got %v, want source: required", err)
	}
}

func TestValidateErrorType(t *testing.T) {
	c := &config.Config{Source: config.NewSecret("postgres://h/db")}
	c.Snapshot.Parallelism = 100
	err := c.Validate()
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Path != "snapshot.parallelism" {
		t.Fatalf("got %v, want *Error at snapshot.parallelism", err)
	}
	eq(t, "message", err.Error(), "config: snapshot.parallelism: must be between 1 and 64, got 100")
}

func TestOfflineValidation(t *testing.T) {
	c := &config.Config{}
	if err := c.ValidateOffline(); err == nil || !strings.Contains(err.Error(), "name: required when source is not set") {
		t.Fatalf("got %v", err)
	}
	c = &config.Config{Name: "shop"}
	if err := c.ValidateOffline(); err != nil {
		t.Fatal(err)
	}
	eq(t, "slot", c.Slot, "tidemark_shop")
}

func TestNameDefaults(t *testing.T) {
	tests := []struct {
		source, name, wantName, wantErr string
	}{
		{source: "postgres://u@h/Shop", wantName: "shop"},
		{source: "postgresql://u@h:5433/shop_2", wantName: "shop_2"},
		{source: "postgres://u@h?dbname=orders", wantName: "orders"},
		{source: "host=h dbname=Billing user=u", wantName: "billing"},
		{source: "postgres://u@h/my-db", wantErr: `name: not set, and the source database name "my-db" cannot be used`},
		{source: "postgres://u@h/my-db", name: "mydb", wantName: "mydb"},
		{source: "postgres://u@h", wantErr: "name: not set, and source names no database"},
		{source: "postgres://u@h/db", name: "Bad", wantErr: "name: must match ^[a-z_][a-z0-9_]*$"},
		{source: "postgres://u@h/" + strings.Repeat("x", 60), wantErr: "publication: the default \"tidemark_xxx"},
	}
	for _, tt := range tests {
		c := &config.Config{Source: config.NewSecret(tt.source), Name: tt.name}
		err := c.Validate()
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: got %v, want error containing %q", tt.source, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.source, err)
			continue
		}
		eq(t, tt.source, c.Name, tt.wantName)
	}
}

func TestInterpolationInline(t *testing.T) {
	// $ not followed by { or $ is literal, e.g. in a password.
	setTestEnv(t)
	p := filepath.Join(t.TempDir(), "c.yaml")
	body := "source: \"postgres://u:pa$word@${TM_TEST_HOST}/db\"\nname: a$$b\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "source", c.Source.Reveal(), "postgres://u:pa$word@db.example.com/db")
	eq(t, "name", c.Name, "a$b")
}

func TestInterpolationRejectsNewline(t *testing.T) {
	t.Setenv("TM_TEST_MULTILINE", "a\nsnapshot:\n  parallelism: 9")
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("name: ${TM_TEST_MULTILINE}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(p)
	if err == nil || !strings.Contains(err.Error(), "c.yaml:1: environment variable TM_TEST_MULTILINE contains a newline") {
		t.Fatalf("got %v", err)
	}
}
