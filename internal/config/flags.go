package config

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// field ties a YAML path to its flag.
type field struct {
	path  string
	flag  string
	usage string
	ptr   func(c *Config) any // pointer to the field in c
}

// fields lists every setting once; BindFlags, ApplyFlags and the docs test
// are driven by it.
var fields = []field{
	{"source", "source", "PostgreSQL source: postgres://user@host:port/database or key=value string (required, unless given by --source-file or " + SourceEnv + "; a password here is visible to every user in the process list: use " + SourceEnv + ", --source-file, PGPASSWORD/.pgpass or ${VAR} in the config file)", func(c *Config) any { return &c.Source }},
	{"source_file", "source-file", "file holding the source connection string (one line), instead of --source", func(c *Config) any { return &c.SourceFile }},
	{"name", "name", "source name, [a-z_][a-z0-9_]* (default: the source's database name)", func(c *Config) any { return &c.Name }},
	{"warehouse", "warehouse", "lake root: a directory, or s3://bucket/prefix (AWS_* environment)", func(c *Config) any { return &c.Warehouse }},
	{"catalog", "catalog", "Iceberg catalog: postgres:// URL or rest+http(s)://host:port REST catalog (default: SQLite at <warehouse>/catalog.db)", func(c *Config) any { return &c.Catalog }},
	{"lake.format", "lake-format", "table format of bronze and silver: iceberg or delta (Delta Lake, no catalog; choose before the first run)", func(c *Config) any { return &c.Lake.Format }},
	{"publication", "publication", "PostgreSQL publication (default: tidemark_<name>)", func(c *Config) any { return &c.Publication }},
	{"slot", "slot", "logical replication slot (default: tidemark_<name>)", func(c *Config) any { return &c.Slot }},
	{"tables", "tables", "comma-separated schema.table list (default: all tables)", func(c *Config) any { return &c.Tables }},
	{"merge_keys", "merge-keys", "columns silver merges a table by instead of its primary key, schema.table=col1,col2 (repeat for each table; default: none)", func(c *Config) any { return &c.MergeKeys }},
	{"gold", "gold", "a gold table, NAME=SQL over silver.<schema>.<table>, refreshed after each silver merge (repeat for more; the config file's gold: list also takes every:)", func(c *Config) any { return &c.Gold }},
	{"commit_interval", "commit-interval", "longest time between lake commits", func(c *Config) any { return &c.CommitInterval }},
	{"commit_bytes", "commit-bytes", "commit when this many bytes of rows are buffered (default: memory-budget/16)", func(c *Config) any { return &c.CommitBytes }},
	{"max_value_bytes", "max-value-bytes", "rows with a column value longer than this go to the dead-letter table; 0: no maximum", func(c *Config) any { return &c.MaxValueBytes }},
	{"time_as", "time-as", "how a time column lands: time (Iceberg time, PostgreSQL only), text (string, the source's text) or micros (long, microseconds; the MySQL default); Spark 3.5 cannot read Iceberg time", func(c *Config) any { return &c.TimeAs }},
	{"memory_budget", "memory-budget", "the process's memory budget (resident memory): Go's soft memory limit is set below it (unless GOMEMLIMIT is set), and it bounds commit-bytes, snapshot chunks and silver's merge pass", func(c *Config) any { return &c.MemoryBudget }},
	{"heartbeat_interval", "heartbeat-interval", "interval of the heartbeat message (pg_logical_emit_message) that moves the watermark and the slot on an idle source", func(c *Config) any { return &c.HeartbeatInterval }},
	{"publication_poll", "publication-poll", "how often to look for tables added to the publication", func(c *Config) any { return &c.PublicationPoll }},
	{"snapshot.enabled", "snapshot-enabled", "copy existing rows before streaming changes", func(c *Config) any { return &c.Snapshot.Enabled }},
	{"snapshot.parallelism", "snapshot-parallelism", "tables snapshotted at once (1..64)", func(c *Config) any { return &c.Snapshot.Parallelism }},
	{"snapshot.chunk_rows", "snapshot-chunk-rows", "most rows per snapshot chunk", func(c *Config) any { return &c.Snapshot.ChunkRows }},
	{"snapshot.chunk_bytes", "snapshot-chunk-bytes", "most bytes per snapshot chunk (default: memory-budget/16, less if snapshot-parallelism chunks would not fit)", func(c *Config) any { return &c.Snapshot.ChunkBytes }},
	{"mysql.server_id", "mysql-server-id", "server_id the MySQL/MariaDB binlog reader registers with, unique among the server's replicas (default: derived from the name)", func(c *Config) any { return &c.MySQL.ServerID }},
	{"mysql.flavor", "mysql-flavor", "mysql or mariadb (default: detected from the server's VERSION())", func(c *Config) any { return &c.MySQL.Flavor }},
	{"silver.enabled", "silver-enabled", "keep silver (replica) tables current while running", func(c *Config) any { return &c.Silver.Enabled }},
	{"silver.every", "silver-every", "how often tidemark run merges bronze into silver (e.g. 4h)", func(c *Config) any { return &c.Silver.Every }},
	{"silver.buckets", "silver-buckets", "silver partitioning bucket(N, first key column); 0: unpartitioned", func(c *Config) any { return &c.Silver.Buckets }},
	{"silver.delete_mode", "silver-delete-mode", "merge-on-read (position deletes) or copy-on-write", func(c *Config) any { return &c.Silver.DeleteMode }},
	{"silver.soft_deletes", "silver-soft-deletes", "keep deleted rows in silver with cdc_deleted = true", func(c *Config) any { return &c.Silver.SoftDeletes }},
	{"silver.max_changes", "silver-max-changes", "most bronze rows merged into silver per commit", func(c *Config) any { return &c.Silver.MaxChanges }},
	{"silver.drop_column", "silver-drop-column", "a column dropped at the source: keep (stays in silver, NULL in rows changed since) or drop (deleted from silver); bronze keeps it", func(c *Config) any { return &c.Silver.DropColumn }},
	{"retry.initial_backoff", "retry-initial-backoff", "first wait after a transient error", func(c *Config) any { return &c.Retry.InitialBackoff }},
	{"retry.max_backoff", "retry-max-backoff", "longest wait between retries", func(c *Config) any { return &c.Retry.MaxBackoff }},
	{"retry.max_elapsed", "retry-max-elapsed", "give up (transient exit code) after retrying this long", func(c *Config) any { return &c.Retry.MaxElapsed }},
	{"log.level", "log-level", "log level: debug, info, warn, error", func(c *Config) any { return &c.Log.Level }},
	{"log.format", "log-format", "log format: text or json", func(c *Config) any { return &c.Log.Format }},
	{"sink", "sink", "where changes go: empty for the lake (default), or kafka://host:port[,host:port] to publish Debezium-compatible events to Kafka", func(c *Config) any { return &c.Sink }},
	{"topic_prefix", "topic-prefix", "Kafka topic prefix: topics are <prefix>.<schema>.<table> (default: the source name)", func(c *Config) any { return &c.TopicPrefix }},
	{"kafka.partitions", "kafka-partitions", "partitions of each topic tidemark creates", func(c *Config) any { return &c.Kafka.Partitions }},
	{"kafka.replication_factor", "kafka-replication-factor", "replication factor of each topic tidemark creates; -1: the broker's default", func(c *Config) any { return &c.Kafka.ReplicationFactor }},
	{"kafka.retention", "kafka-retention", "retention.ms of the topics tidemark creates", func(c *Config) any { return &c.Kafka.Retention }},
	{"kafka.min_retention", "kafka-min-retention", "an existing topic with a shorter retention (or 0) is refused at start", func(c *Config) any { return &c.Kafka.MinRetention }},
	{"kafka.max_message_bytes", "kafka-max-message-bytes", "max.message.bytes of the topics tidemark creates, and the producer's limit", func(c *Config) any { return &c.Kafka.MaxMessageBytes }},
	{"kafka.send_timeout", "kafka-send-timeout", "a record the broker has not acknowledged within this fails the send, and the pipeline stops without acknowledging the source", func(c *Config) any { return &c.Kafka.SendTimeout }},
	{"from", "from", "tidemark load: the Kafka to read the capture's topics from, kafka://host:port[,host:port]", func(c *Config) any { return &c.From }},
	{"group", "group", "tidemark load: the consumer group its loaded offsets are committed to, for monitoring (default: tidemark-load-<topic-prefix>)", func(c *Config) any { return &c.Group }},
	{"metrics_addr", "metrics-addr", "host:port to serve Prometheus /metrics on (default: off)", func(c *Config) any { return &c.MetricsAddr }},
	{"spool_dir", "spool-dir", "directory for spilled data (default: <warehouse>/_tidemark/spool)", func(c *Config) any { return &c.SpoolDir }},
}

// flagValue is the pflag.Value of every config flag. It remembers its
// field so that ApplyFlags can copy what the user set into another Config.
type flagValue struct {
	pflag.Value
	field *field
	src   *Config
}

// BindFlags registers one flag per setting on fs, bound to c (--source,
// --commit-interval, --snapshot-parallelism, ...; see docs/configuration.md).
// It first gives c's zero settings the defaults Validate would give them
// (Defaults), so that --help shows the real ones; a setting derived from
// another (its usage says "(default: ...)") shows none. Use Resolve (or
// ApplyFlags) to apply only the flags the user set on top of a config file.
func (c *Config) BindFlags(fs *pflag.FlagSet) {
	def := Defaults()
	for i := range fields {
		f := &fields[i]
		if dst := reflect.ValueOf(f.ptr(c)).Elem(); dst.IsZero() && !f.derived() {
			dst.Set(reflect.ValueOf(f.ptr(&def)).Elem())
		}
		v := valueOf(f.ptr(c))
		fl := fs.VarPF(&flagValue{Value: v, field: f, src: c}, f.flag, "", f.usage)
		if _, ok := v.(*optBool); ok {
			fl.NoOptDefVal = "true"
		}
		if f.derived() {
			fl.DefValue = "" // derived in Validate; the usage says from what
		}
	}
}

// valueOf returns the flag value of a field pointer from field.ptr.
func valueOf(p any) pflag.Value {
	switch p := p.(type) {
	case *string:
		return (*stringValue)(p)
	case *int:
		return (*intValue)(p)
	case **bool:
		return &optBool{p}
	case *[]string:
		return &listValue{p: p}
	case pflag.Value: // *Secret, *Duration, *ByteSize
		return p
	}
	panic(fmt.Sprintf("config: no flag type for %T", p)) // a bug in this package, caught by tests
}

// derived reports whether the setting's default is computed from other
// settings (name, publication, slot, commit_bytes, snapshot.chunk_bytes,
// spool_dir): its usage then says "(default: ...)".
func (f *field) derived() bool { return strings.Contains(f.usage, "(default: ") }

// Defaults returns the settings Validate gives a configuration that sets
// nothing: the fixed defaults (DefaultCommitInterval, DefaultSilverEvery,
// ...), and the derived ones as Validate derives them from those (name,
// publication and slot, derived from the source, are empty). BindFlags
// shows them in --help.
func Defaults() Config {
	var c Config
	_ = c.ValidateOffline() // reports the missing name; every default is filled regardless
	return c
}

// ApplyFlags copies into c the value of every flag registered by BindFlags
// that was set on the command line (fs.Changed); flags left alone do not
// touch c. A flag counts as explicitly set for Validate, so
// --snapshot-parallelism=0 is an error rather than the default.
func (c *Config) ApplyFlags(fs *pflag.FlagSet) {
	fs.Visit(func(fl *pflag.Flag) {
		fv, ok := fl.Value.(*flagValue)
		if !ok {
			return
		}
		dst := reflect.ValueOf(fv.field.ptr(c)).Elem()
		src := reflect.ValueOf(fv.field.ptr(fv.src)).Elem()
		switch src.Kind() {
		case reflect.Slice:
			dst.Set(reflect.AppendSlice(reflect.MakeSlice(src.Type(), 0, src.Len()), src))
		case reflect.Pointer:
			b := *src.Interface().(*bool)
			dst.Set(reflect.ValueOf(&b))
		default:
			dst.Set(src)
		}
		if src.Kind() == reflect.Slice {
			for p := range c.set { // the file's item lines no longer apply
				if strings.HasPrefix(p, fv.field.path+"[") {
					delete(c.set, p)
				}
			}
		}
		c.markSet(fv.field.path, origin{flag: fl.Name})
	})
}

// Resolve builds the configuration of a command: the file at configPath
// (none if empty), then the flags set on fs (registered with BindFlags),
// then Validate. Precedence: defaults < file < flags; the source comes
// from --source or --source-file (not both), else from the file's source
// or source_file (not both), else from $TIDEMARK_SOURCE.
func Resolve(fs *pflag.FlagSet, configPath string) (*Config, error) {
	cfg := &Config{}
	if configPath != "" {
		var err error
		if cfg, err = Load(configPath); err != nil {
			return nil, err
		}
	}
	cfg.ApplyFlags(fs)
	if err := cfg.settleSource(fs.Changed, os.LookupEnv); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ResolveLoad is Resolve for tidemark load, which reads Kafka, not a
// source: the file, then the flags, then ValidateLoad.
func ResolveLoad(fs *pflag.FlagSet, configPath string) (*Config, error) {
	cfg := &Config{}
	if configPath != "" {
		var err error
		if cfg, err = Load(configPath); err != nil {
			return nil, err
		}
	}
	cfg.ApplyFlags(fs)
	if err := cfg.ValidateLoad(); err != nil {
		return nil, err
	}
	return cfg, nil
}

type stringValue string

func (s *stringValue) Set(v string) error { *s = stringValue(v); return nil }
func (s *stringValue) String() string     { return string(*s) }
func (s *stringValue) Type() string       { return "string" }

type intValue int

func (i *intValue) Set(v string) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("must be a whole number")
	}
	*i = intValue(n)
	return nil
}
func (i *intValue) String() string { return strconv.Itoa(int(*i)) }
func (i *intValue) Type() string   { return "int" }

// optBool is a *bool flag: unset (nil) means "default".
type optBool struct{ p **bool }

func (b *optBool) Set(v string) error {
	x, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("must be true or false")
	}
	*b.p = &x
	return nil
}

func (b *optBool) String() string {
	if *b.p == nil {
		return ""
	}
	return strconv.FormatBool(**b.p)
}
func (b *optBool) Type() string { return "bool" }

// listValue is a comma-separated list that keeps commas inside double
// quotes (pflag's stringSlice reads CSV, which rejects "a"."b"). Repeating
// the flag appends.
type listValue struct {
	p       *[]string
	changed bool
}

func (l *listValue) Set(v string) error {
	items := splitList(v)
	if !l.changed {
		*l.p = items
	} else {
		*l.p = append(*l.p, items...)
	}
	l.changed = true
	return nil
}
func (l *listValue) String() string { return strings.Join(*l.p, ",") }
func (l *listValue) Type() string   { return "strings" }
