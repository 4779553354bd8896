// Package config is tidemark's configuration: one typed tree read from a
// YAML file (with ${VAR} interpolation), overridden by command-line flags,
// and checked by Validate, which also fills in defaults.
//
// Precedence is defaults < file < flags: Resolve loads the file, applies
// the flags the user actually set, then validates. Every error names the
// YAML path of the offending key, and when it comes from the file, the
// file and line.
//
// Connection strings are Secrets: their String, GoString, fmt verbs,
// slog and YAML/JSON forms show the password as "xxxxx", and no error
// from this package contains a password, however malformed the URL.
// docs/configuration.md documents every key.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tidemark/tidemark/internal/fault"
)

// Config is tidemark's configuration. The zero value plus Validate is a
// complete configuration except for Source.
type Config struct {
	// Source is the PostgreSQL connection: postgres:// URL or key=value DSN.
	Source Secret `yaml:"source"`
	// SourceFile names a file that holds Source (one line; a trailing
	// newline is dropped), so that the password is neither on the command
	// line nor in the config file. At most one of Source and SourceFile.
	SourceFile string `yaml:"source_file"`
	// Name names the source; tables, slot and publication names derive
	// from it. Default: the database name of Source, lowercased.
	Name string `yaml:"name"`
	// Warehouse is the lake's root directory. Default "./lake".
	Warehouse string `yaml:"warehouse"`
	// Catalog is the Iceberg catalog: empty for SQLite at
	// <warehouse>/catalog.db, else a postgres:// URL. A Delta lake has
	// none (the warehouse's directories are its catalog).
	Catalog Secret `yaml:"catalog"`
	// Lake chooses the table format.
	Lake Lake `yaml:"lake"`
	// Publication is the PostgreSQL publication. Default "tidemark_<name>".
	Publication string `yaml:"publication"`
	// Slot is the logical replication slot. Default "tidemark_<name>".
	Slot string `yaml:"slot"`
	// Tables lists "schema.table" names; empty means all tables.
	Tables []string `yaml:"tables"`
	// MergeKeys declares the columns silver merges a table by, instead of
	// its primary key (mergekey.go). Default: none.
	MergeKeys MergeKeys `yaml:"merge_keys"`
	// CommitInterval is the longest time between lake commits. Default 500ms.
	CommitInterval Duration `yaml:"commit_interval"`
	// CommitBytes triggers a commit when this many bytes of rows are
	// buffered. Default memory_budget/16 (16MiB).
	CommitBytes ByteSize `yaml:"commit_bytes"`
	// MemoryBudget is the process's memory budget, its resident memory:
	// Go's soft memory limit is set below it, leaving room for the memory
	// Go does not manage (unless GOMEMLIMIT is set), and the buffers are
	// derived from it. Default 256MiB.
	MemoryBudget ByteSize `yaml:"memory_budget"`
	// MaxValueBytes is the largest column value captured: a row with a
	// longer value (PostgreSQL: its text as the source sends it;
	// MySQL/MariaDB: its lake form) goes to the dead-letter table, with its
	// key, instead of bronze. 0 (the default): no maximum.
	MaxValueBytes ByteSize `yaml:"max_value_bytes"`
	// TimeAs is how a PostgreSQL `time` column lands in the lake: "time"
	// (Iceberg time, the default), "text" (Iceberg string, PostgreSQL's
	// text of it) or "micros" (Iceberg long, microseconds since midnight),
	// for readers that cannot open Iceberg time (Spark 3.5). A MySQL TIME
	// (a signed duration) lands as "micros" (its default) or "text".
	TimeAs string `yaml:"time_as"`
	// HeartbeatInterval is how often a heartbeat logical message is written
	// to the source; its commit moves the watermark and lets the slot advance
	// on an idle database. Default 1s.
	HeartbeatInterval Duration `yaml:"heartbeat_interval"`
	// PublicationPoll is how often to look for tables newly added to the
	// publication. Default 10s.
	PublicationPoll Duration `yaml:"publication_poll"`
	Snapshot        Snapshot `yaml:"snapshot"`
	// MySQL configures a mysql:// source.
	MySQL  MySQL  `yaml:"mysql"`
	Silver Silver `yaml:"silver"`
	// Gold declares the gold tables tidemark run keeps current from
	// silver (gold.go, docs/gold.md). Default: none.
	Gold  GoldTables `yaml:"gold"`
	Retry Retry      `yaml:"retry"`
	Log   Log        `yaml:"log"`
	// Sink is where run writes the changes: empty for the lake (bronze and
	// silver, the default), or kafka://host:port[,host:port...] to publish
	// them as Debezium-compatible events (sink.go).
	Sink Secret `yaml:"sink"`
	// TopicPrefix prefixes the Kafka topics: <prefix>.<schema>.<table>.
	// Default: the source name.
	TopicPrefix string `yaml:"topic_prefix"`
	Kafka       Kafka  `yaml:"kafka"`
	// From is the Kafka tidemark load reads the capture's topics from:
	// kafka://host:port[,host:port...] (load.go).
	From Secret `yaml:"from"`
	// Group is the consumer group tidemark load commits the offsets it
	// loaded to, for monitoring (the lake holds the offsets it resumes
	// from). Default tidemark-load-<topic_prefix>.
	Group string `yaml:"group"`
	// MetricsAddr is host:port for Prometheus /metrics; empty is off.
	MetricsAddr string `yaml:"metrics_addr"`
	// SpoolDir holds data spilled to disk. Default <warehouse>/_tidemark/spool.
	SpoolDir string `yaml:"spool_dir"`

	// Deprecations lists the deprecated keys the file gave (top-level
	// slot: and publication:), in a fixed order; Load fills it, flags do
	// not change it. Each names the key, its line and its new spelling,
	// never its value.
	Deprecations []Deprecation `yaml:"-"`

	// set holds the YAML paths given explicitly in the file or by flags,
	// and where: an explicit zero ("parallelism: 0") is checked, not
	// defaulted, and Validate's errors point at the line or the flag.
	set  map[string]origin
	file string // the file Load read
	// sourceFromFile: Source was read from SourceFile by Validate.
	sourceFromFile bool
	// sourceType is the type: of a typed source block ("" without one).
	sourceType string
}

// origin says where a setting came from.
type origin struct {
	line int    // line in Config.file
	flag string // or the flag that set it
	env  string // or the environment variable that set it
}

// Lake configures the lake's tables.
type Lake struct {
	// Format is the table format of bronze and silver: "iceberg" (the
	// default) or "delta" (Delta Lake, internal/lake/delta). Choose it
	// before the first run: the tables of a warehouse are of one format.
	Format string `yaml:"format"`
}

// The values of lake.format.
const (
	LakeIceberg = "iceberg"
	LakeDelta   = "delta"
)

// Snapshot configures the initial copy of existing rows.
type Snapshot struct {
	// Enabled: copy existing rows before streaming. Default true.
	Enabled *bool `yaml:"enabled"`
	// Parallelism is the number of tables or chunks copied at once, 1..64.
	// Default 2.
	Parallelism int `yaml:"parallelism"`
	// ChunkRows is the most rows read per chunk. Default 100000 (chunk_bytes
	// bounds a chunk of wide rows first).
	ChunkRows int `yaml:"chunk_rows"`
	// ChunkBytes is the most bytes read per chunk. Default memory_budget/16.
	ChunkBytes ByteSize `yaml:"chunk_bytes"`
}

// IsEnabled reports Enabled, true when unset.
func (s Snapshot) IsEnabled() bool { return s.Enabled == nil || *s.Enabled }

// Silver configures the replica tables merged from bronze.
type Silver struct {
	// Enabled: tidemark run keeps silver current. Default true.
	Enabled *bool `yaml:"enabled"`
	// Every is the merge cadence of tidemark run. Default 5s; e.g. 4h.
	Every Duration `yaml:"every"`
	// Buckets is N of the partitioning bucket(N, first key column); 0
	// leaves silver unpartitioned. Default 16 at most: a table whose
	// bronze data at its build is under 128 MiB is unpartitioned, a larger
	// one gets a bucket per 64 MiB (silver.AdaptedBuckets).
	Buckets int `yaml:"buckets"`
	// DeleteMode is merge-on-read (position deletes) or copy-on-write.
	DeleteMode string `yaml:"delete_mode"`
	// SoftDeletes keeps deleted rows with cdc_deleted = true. Default false.
	SoftDeletes *bool `yaml:"soft_deletes"`
	// MaxChanges bounds the bronze rows one silver commit merges. Default 500000.
	MaxChanges int `yaml:"max_changes"`
	// DropColumn is what silver does with a column dropped at the source:
	// keep (it stays, NULL in rows changed since) or drop (deleted from
	// silver). Bronze keeps it either way. Default keep.
	DropColumn string `yaml:"drop_column"`
}

// IsEnabled reports Enabled, true when unset.
func (s Silver) IsEnabled() bool { return s.Enabled == nil || *s.Enabled }

// DropColumns reports whether silver deletes a column dropped at the
// source (DropColumn is drop).
func (s Silver) DropColumns() bool { return s.DropColumn == DropColumnDrop }

// SoftDeletesOn reports SoftDeletes, false when unset.
func (s Silver) SoftDeletesOn() bool { return s.SoftDeletes != nil && *s.SoftDeletes }

// Retry configures the backoff for transient errors.
type Retry struct {
	InitialBackoff Duration `yaml:"initial_backoff"` // default 500ms
	MaxBackoff     Duration `yaml:"max_backoff"`     // default 30s
	// MaxElapsed is how long transient errors are retried before tidemark
	// exits with the transient-error exit code. Default 10m.
	MaxElapsed Duration `yaml:"max_elapsed"`
}

// Log configures logging.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error; default info
	Format string `yaml:"format"` // text or json; default text
}

// SlogLevel returns Level as a slog.Level (info if unset or unknown).
func (l Log) SlogLevel() slog.Level {
	switch strings.ToLower(l.Level) {
	case "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Secrets returns the connection strings of c, for RedactError.
func (c *Config) Secrets() []Secret { return []Secret{c.Source, c.Catalog, c.Sink, c.From} }

// Error is a configuration problem. Path is the YAML path of the key
// ("snapshot.parallelism", "tables[2]"), empty when the problem is not one
// key's; File and Line locate it in the config file when known.
type Error struct {
	Path string
	Msg  string
	File string
	Line int
}

// Error formats "config: [file:line: ]path: msg".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads the YAML file at path. ${VAR} references are expanded from
// the environment first (see docs/configuration.md); unknown keys, bad
// values and duplicate keys are errors naming the key's path and line.
// Load does not fill defaults: call Validate, or use Resolve.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		// A configuration error (exit 2), never a transient one: the
		// file will not appear by retrying.
		return nil, fault.With(fault.ErrBadConfig, fmt.Sprintf("config: cannot read config file %s: check the path given to --config", path), err)
	}
	return parse(path, data, os.LookupEnv)
}

// parse is Load on bytes, with the environment given.
func parse(file string, data []byte, lookup func(string) (string, bool)) (*Config, error) {
	text, err := interpolate(file, data, lookup)
	if err != nil {
		return nil, err
	}
	cfg := &Config{}
	dec := yaml.NewDecoder(bytes.NewReader(text))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return cfg, nil // empty file
		}
		return nil, yamlError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlError(file, err)
		}
		return nil, &Error{File: file, Line: extra.Line, Msg: "more than one YAML document; a config file holds one"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return cfg, nil
	}
	cfg.file = file
	d := &decoder{file: file, cfg: cfg}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: root.Line, Msg: "the top level must be a mapping of keys (source:, warehouse:, ...), got " + kindName(root)}
	}
	d.mapping(root, reflect.ValueOf(cfg).Elem(), "")
	d.foldSourceBlock()
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return cfg, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func yamlError(file string, err error) error {
	msg := RedactURL(err.Error())
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &Error{File: file, Line: line, Msg: "invalid YAML: " + m[2]}
	}
	return &Error{File: file, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

// decoder walks the YAML node tree against the Config struct, so that
// every error can name the key's full path and line (yaml.v3's own
// KnownFields errors give the line but not the path).
type decoder struct {
	file string
	cfg  *Config
	errs []error
	// block is the typed source block, folded into cfg once the whole
	// file is read (foldSourceBlock).
	block *sourceBlock
}

func (d *decoder) fail(n *yaml.Node, path, msg string) {
	d.errs = append(d.errs, &Error{Path: path, Msg: msg, File: d.file, Line: n.Line})
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// yamlFields maps the yaml keys of struct type t to field indexes.
func yamlFields(t reflect.Type) (map[string]int, []string) {
	idx := map[string]int{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		idx[name] = i
		names = append(names, name)
	}
	return idx, names
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	idx, names := yamlFields(v.Type())
	seen := map[string]int{}
	// Merge keys ("<<: *defaults") first, so that explicit keys win.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := resolveAlias(n.Content[i]); k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Tag == "!!merge" {
			val := resolveAlias(n.Content[i+1])
			switch val.Kind {
			case yaml.MappingNode:
				d.mapping(val, v, path)
			case yaml.SequenceNode:
				for _, m := range val.Content {
					if m = resolveAlias(m); m.Kind == yaml.MappingNode {
						d.mapping(m, v, path)
					}
				}
			default:
				d.fail(k, path, "merge key \"<<\" must refer to a mapping")
			}
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := resolveAlias(n.Content[i]), resolveAlias(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Tag == "!!merge" {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "keys must be plain names, got "+kindName(k))
			continue
		}
		p := joinPath(path, k.Value)
		if prev, dup := seen[k.Value]; dup {
			d.fail(k, p, fmt.Sprintf("duplicate key (first set on line %d)", prev))
			continue
		}
		seen[k.Value] = k.Line
		fi, ok := idx[k.Value]
		if !ok && path == "" && strings.HasPrefix(k.Value, "x-") {
			continue // extension key, e.g. to hold YAML anchors
		}
		if !ok {
			d.fail(k, p, "unknown key"+suggest(k.Value, path, names))
			continue
		}
		d.value(val, v.Field(fi), p)
	}
}

var (
	unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	boolPtrType     = reflect.TypeFor[*bool]()
)

func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // "key:" with no value: as if absent
	}
	if path == "source" && n.Kind == yaml.MappingNode {
		d.sourceBlock(n)
		return
	}
	if v.Addr().Type().Implements(unmarshalerType) {
		if err := v.Addr().Interface().(yaml.Unmarshaler).UnmarshalYAML(n); err != nil {
			d.fail(n, path, err.Error())
			return
		}
		d.cfg.markSet(path, origin{line: n.Line})
		return
	}
	switch {
	case v.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.fail(n, path, "expected a mapping of keys, got "+kindName(n))
			return
		}
		d.mapping(n, v, path)
	case v.Kind() == reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.fail(n, path, "expected a string, got "+kindName(n))
			return
		}
		v.SetString(n.Value)
		d.cfg.markSet(path, origin{line: n.Line})
	case v.Kind() == reflect.Int:
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if n.Kind != yaml.ScalarNode || err != nil {
			what := kindName(n)
			if n.Kind == yaml.ScalarNode {
				what = showValue(n.Value)
			}
			d.fail(n, path, "must be a whole number, got "+what)
			return
		}
		v.SetInt(i)
		d.cfg.markSet(path, origin{line: n.Line})
	case v.Type() == boolPtrType:
		var b bool
		if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
			what := kindName(n)
			if n.Kind == yaml.ScalarNode {
				what = showValue(n.Value)
			}
			d.fail(n, path, "must be true or false, got "+what)
			return
		}
		v.Set(reflect.ValueOf(&b))
		d.cfg.markSet(path, origin{line: n.Line})
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		var list []string
		switch n.Kind {
		case yaml.ScalarNode: // "a.b, c.d", e.g. from ${TABLES}
			list = splitList(n.Value)
		case yaml.SequenceNode:
			for i, e := range n.Content {
				e = resolveAlias(e)
				if e.Kind != yaml.ScalarNode {
					d.fail(e, fmt.Sprintf("%s[%d]", path, i), "expected a string, got "+kindName(e))
					continue
				}
				list = append(list, e.Value)
				d.cfg.markSet(fmt.Sprintf("%s[%d]", path, i), origin{line: e.Line})
			}
		default:
			d.fail(n, path, "expected a list, got "+kindName(n))
			return
		}
		v.Set(reflect.ValueOf(list))
		d.cfg.markSet(path, origin{line: n.Line})
	default:
		d.fail(n, path, "unsupported field type "+v.Type().String()) // a bug in this package
	}
}

func (c *Config) markSet(path string, o origin) {
	if c.set == nil {
		c.set = map[string]origin{}
	}
	c.set[path] = o
}

func (c *Config) isSet(path string) bool { _, ok := c.set[path]; return ok }

// BucketsGiven reports whether silver.buckets was given (file, flag or
// environment) rather than defaulted: a default lets silver give a small
// table fewer buckets (silver.Options.AdaptBuckets).
func (c *Config) BucketsGiven() bool { return c.isSet("silver.buckets") }

// TimeAsGiven reports whether time_as was given (file, flag or
// environment) rather than defaulted: a MySQL source refuses a given
// time_as: time, which cannot hold its TIME values.
func (c *Config) TimeAsGiven() bool { return c.isSet("time_as") }

// suggest returns a "did you mean" hint for an unknown key.
func suggest(key, parent string, siblings []string) string {
	norm := strings.ReplaceAll(strings.ToLower(key), "-", "_")
	best, bestDist := "", 3
	for _, s := range siblings {
		if s == norm {
			return fmt.Sprintf("; did you mean %q?", s)
		}
		if dist := levenshtein(norm, s); dist < bestDist && dist <= len(s)/3+1 {
			best, bestDist = s, dist
		}
	}
	if best != "" {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	// A key at the wrong level: "parallelism" at the top instead of under
	// "snapshot", or a flattened "snapshot_parallelism".
	for _, p := range allPaths() {
		last := p[strings.LastIndexByte(p, '.')+1:]
		if p != joinPath(parent, norm) && (last == norm || strings.ReplaceAll(p, ".", "_") == norm) {
			return fmt.Sprintf("; did you mean %s?", p)
		}
	}
	sort.Strings(siblings)
	return "; valid keys here: " + strings.Join(siblings, ", ")
}

// allPaths lists the YAML path of every leaf of Config.
func allPaths() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		idx, names := yamlFields(t)
		for _, n := range names {
			ft := t.Field(idx[n]).Type
			p := joinPath(prefix, n)
			if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(unmarshalerType) {
				walk(ft, p)
				continue
			}
			out = append(out, p)
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return out
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// splitList splits a comma-separated list, keeping commas inside double
// quotes ("my,schema".t), and drops empty items.
func splitList(s string) []string {
	var out []string
	inQuote, start := false, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] == '"' {
			inQuote = !inQuote
		}
		if i == len(s) || s[i] == ',' && !inQuote {
			if item := strings.TrimSpace(s[start:i]); item != "" {
				out = append(out, item)
			}
			start = i + 1
		}
	}
	return out
}

// attrs lists every setting, secrets redacted, for String and LogValue.
func (c Config) attrs() []slog.Attr {
	enabled := "default"
	if c.Snapshot.Enabled != nil {
		enabled = strconv.FormatBool(*c.Snapshot.Enabled)
	}
	return []slog.Attr{
		slog.String("source", c.Source.String()),
		slog.String("name", c.Name),
		slog.String("warehouse", c.Warehouse),
		slog.String("catalog", c.Catalog.String()),
		slog.String("publication", c.Publication),
		slog.String("slot", c.Slot),
		slog.String("tables", strings.Join(c.Tables, ",")),
		slog.String("commit_interval", c.CommitInterval.String()),
		slog.String("commit_bytes", c.CommitBytes.String()),
		slog.String("max_value_bytes", c.MaxValueBytes.String()),
		slog.String("time_as", c.TimeAs),
		slog.String("memory_budget", c.MemoryBudget.String()),
		slog.String("heartbeat_interval", c.HeartbeatInterval.String()),
		slog.String("publication_poll", c.PublicationPoll.String()),
		slog.Group("snapshot",
			slog.String("enabled", enabled),
			slog.Int("parallelism", c.Snapshot.Parallelism),
			slog.Int("chunk_rows", c.Snapshot.ChunkRows),
			slog.String("chunk_bytes", c.Snapshot.ChunkBytes.String())),
		slog.Group("retry",
			slog.String("initial_backoff", c.Retry.InitialBackoff.String()),
			slog.String("max_backoff", c.Retry.MaxBackoff.String()),
			slog.String("max_elapsed", c.Retry.MaxElapsed.String())),
		slog.Group("log",
			slog.String("level", c.Log.Level),
			slog.String("format", c.Log.Format)),
		slog.String("metrics_addr", c.MetricsAddr),
		slog.String("spool_dir", c.SpoolDir),
		slog.String("gold", c.Gold.String()),
	}
}

// LogValue implements slog.LogValuer: every setting, passwords redacted.
func (c Config) LogValue() slog.Value { return slog.GroupValue(c.attrs()...) }

// String prints every setting as key=value pairs, passwords redacted.
func (c Config) String() string {
	var b strings.Builder
	var walk func(prefix string, as []slog.Attr)
	walk = func(prefix string, as []slog.Attr) {
		for _, a := range as {
			if a.Value.Kind() == slog.KindGroup {
				walk(prefix+a.Key+".", a.Value.Group())
				continue
			}
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			v := a.Value.String()
			if v == "" || strings.ContainsAny(v, " \"=") {
				v = strconv.Quote(v)
			}
			b.WriteString(prefix + a.Key + "=" + v)
		}
	}
	walk("", c.attrs())
	return b.String()
}

// GoString makes %#v safe: it prints String's redacted form.
func (c Config) GoString() string { return "config.Config{" + c.String() + "}" }

// Format makes every fmt verb print String's redacted form (or GoString
// for %#v), so that no verb prints fields directly.
func (c Config) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprint(f, c.GoString())
		return
	}
	fmt.Fprint(f, c.String())
}
