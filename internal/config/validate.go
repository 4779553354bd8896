package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/lake/storage"
)

// Defaults. Derived ones (name, publication, slot, spool_dir, and
// commit_bytes and snapshot.chunk_bytes from memory_budget) are computed
// in Validate; DefaultCommitBytes and DefaultChunkBytes are their values
// for DefaultMemoryBudget.
const (
	DefaultWarehouse         = "./lake"
	DefaultCommitInterval    = Duration(500 * time.Millisecond)
	DefaultMemoryBudget      = 256 * MiB
	DefaultCommitBytes       = DefaultMemoryBudget / CommitShare
	DefaultHeartbeatInterval = Duration(time.Second)
	DefaultPublicationPoll   = Duration(10 * time.Second)
	DefaultParallelism       = 2
	DefaultChunkRows         = 100000
	DefaultChunkBytes        = DefaultMemoryBudget / ChunkShare
	DefaultInitialBackoff    = Duration(500 * time.Millisecond)
	DefaultMaxBackoff        = Duration(30 * time.Second)
	DefaultMaxElapsed        = Duration(10 * time.Minute)
	DefaultSilverEvery       = Duration(5 * time.Second)
	DefaultSilverBuckets     = 16
	DefaultSilverDeleteMode  = "merge-on-read"
	DefaultLakeFormat        = LakeIceberg
	DefaultSilverMaxChanges  = 500000
	DefaultLogLevel          = "info"
	DefaultLogFormat         = "text"
	DefaultTimeAs            = "time"

	// The values of silver.drop_column.
	DropColumnKeep = "keep"
	DropColumnDrop = "drop"

	// namePrefix prefixes the default publication and slot names.
	namePrefix = "tidemark_"
)

// TimeAsValues are the values of time_as, the default first (the
// postgres typemap.TimeAs constants).
var TimeAsValues = []string{DefaultTimeAs, "text", "micros"}

// How memory_budget is shared (docs/configuration.md, Commits and memory).
// The buffers a setting bounds, commit_bytes of rows waiting for a commit
// and one snapshot.chunk_bytes chunk per snapshot worker, may take at most
// half of it: the other half is for what those bytes cost on top of their
// count (Arrow builders grow by doubling, a commit encodes and compresses
// Parquet pages and copies statistics), silver's merge pass (SilverShare),
// and the runtime itself.
const (
	// MinMemoryBudget is the smallest memory_budget accepted: the process
	// itself (runtime, catalog, connections) needs a few tens of MiB.
	MinMemoryBudget = 64 * MiB
	// CommitShare: commit_bytes defaults to memory_budget / CommitShare.
	CommitShare = 16
	// ChunkShare: snapshot.chunk_bytes defaults to memory_budget /
	// ChunkShare, less when snapshot.parallelism chunks would not fit.
	ChunkShare = 16
	// SilverShare: a silver merge pass reads at most memory_budget /
	// SilverShare bytes of bronze rows (it holds about three times that).
	SilverShare = 16
	// GoldShare: a gold refresh's DuckDB may use memory_budget / GoldShare
	// (it spills beyond it), and its result may take as much again; it
	// takes turns with silver's merges.
	GoldShare = 4
	// minChunkBytes is the smallest derived snapshot.chunk_bytes.
	minChunkBytes = MiB
)

var (
	nameRE        = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	publicationRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	slotRE        = regexp.MustCompile(`^[a-z0-9_]+$`)
)

// Validate fills in defaults and checks every field. It requires Source.
// Each problem is an *Error naming the YAML path; several are joined with
// errors.Join. Zero values that were not set in the file or by a flag get
// their default; zeros set explicitly are checked like any other value
// ("snapshot.parallelism: 0" is an error).
func (c *Config) Validate() error { return c.validate(modeRun) }

// ValidateOffline is Validate for commands that only read the lake: Source
// may be empty, in which case Name is required.
func (c *Config) ValidateOffline() error { return c.validate(modeOffline) }

// ValidateLoad is Validate for tidemark load: no source (it reads Kafka),
// from is required, and name may be empty (the loader takes the capture's
// name from its checkpoint record).
func (c *Config) ValidateLoad() error { return c.validate(modeLoad) }

// ValidName reports whether s may be a pipeline's name (name:).
func ValidName(s string) bool { return nameRE.MatchString(s) }

// validateMode says which command a configuration is validated for.
type validateMode int

const (
	modeRun     validateMode = iota // tidemark run: a source is required
	modeOffline                     // commands that only read the lake: a name instead of a source
	modeLoad                        // tidemark load: from instead of a source, name optional
)

type checker struct {
	c    *Config
	errs []error
}

// bad records a problem with the setting at path, located at the line or
// flag that set it.
func (k *checker) bad(path, format string, args ...any) {
	k.badFrom(path, path, format, args...)
}

// badFrom records a problem with the setting at path that was caused by
// the setting at from (a default derived from it).
func (k *checker) badFrom(path, from, format string, args ...any) {
	e := &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
	o, ok := k.c.set[from]
	if list, _, isItem := strings.Cut(from, "["); !ok && isItem {
		o, ok = k.c.set[list] // an item of a list set by a flag
	}
	if ok {
		if o.flag != "" {
			e.Msg += " (set by --" + o.flag + ")"
		} else if o.env != "" {
			e.Msg += " (set by " + o.env + ")"
		} else if o.line > 0 {
			e.File, e.Line = k.c.file, o.line
		}
	}
	k.errs = append(k.errs, e)
}

func (c *Config) validate(mode validateMode) error {
	k := &checker{c: c}
	requireSource := mode == modeRun

	// source and name; stray white space around a pasted URL is harmless
	c.readSourceFile(k)
	c.Source = NewSecret(strings.TrimSpace(c.Source.Reveal()))
	c.checkSourceType(k)
	c.Catalog = NewSecret(strings.TrimSpace(c.Catalog.Reveal()))
	var database string
	sourceOK := false
	switch {
	case c.Source.IsZero() && requireSource:
		if c.SourceFile == "" {
			k.bad("source", "required: a postgres:// URL or key=value connection string (set %s, --source-file or source: in the config file, or pass --source)", SourceEnv)
		}
	case !c.Source.IsZero():
		ci, err := parseConninfo(c.Source.Reveal(), true)
		if err != nil {
			k.bad("source", "%v", err)
		} else {
			sourceOK, database = true, ci.database
		}
	}
	nameOK := false
	switch {
	case c.Name != "":
		if !nameRE.MatchString(c.Name) {
			k.bad("name", "must match ^[a-z_][a-z0-9_]*$ (lower-case letters, digits, '_'), got %s", showValue(c.Name))
		} else {
			nameOK = true
		}
	case sourceOK && database == "":
		k.badFrom("name", "source", "not set, and source names no database to derive it from; set name: in the config file or pass --name")
	case sourceOK:
		if n := strings.ToLower(database); nameRE.MatchString(n) {
			c.Name, nameOK = n, true
		} else {
			k.badFrom("name", "source", "not set, and the source database name %s cannot be used as one (lowercased, it must match ^[a-z_][a-z0-9_]*$); set name: in the config file or pass --name", showValue(database))
		}
	case c.Source.IsZero() && mode == modeOffline:
		k.bad("name", "required when source is not set; set name: in the config file or pass --name")
	}

	// warehouse, catalog
	if c.Warehouse == "" && !c.isSet("warehouse") {
		c.Warehouse = DefaultWarehouse
	}
	warehouseOK := strings.TrimSpace(c.Warehouse) != ""
	if !warehouseOK {
		k.bad("warehouse", "must not be empty (default %q)", DefaultWarehouse)
	}
	remote := warehouseOK && storage.IsRemote(c.Warehouse)
	if remote {
		if wh, err := storage.ParseS3(c.Warehouse); err != nil {
			k.bad("warehouse", "%s", strings.TrimPrefix(err.Error(), "warehouse "))
		} else {
			c.Warehouse = wh
		}
		if c.Catalog.IsZero() {
			k.bad("catalog", "required with an s3:// warehouse: rest+https://host:port (an Iceberg REST catalog) or postgres://… (the SQLite catalog is a local file)")
		}
	}
	switch cat := c.Catalog.Reveal(); {
	case cat == "":
	case strings.HasPrefix(cat, "rest+"):
		if err := checkRESTCatalogURL(cat); err != nil {
			k.bad("catalog", "%v", err)
		}
	default:
		if _, err := parseConninfo(cat, false); err != nil {
			k.bad("catalog", "%v (leave catalog empty for SQLite at <warehouse>/catalog.db, or use rest+https://host:port for an Iceberg REST catalog)", err)
		}
	}

	// publication, slot
	c.checkPGName(k, "publication", &c.Publication, nameOK, publicationRE, "^[a-z_][a-z0-9_]*$")
	c.checkPGName(k, "slot", &c.Slot, nameOK, slotRE, "[a-z0-9_]{1,63}")

	// tables
	seen := map[TableName]int{}
	for i, s := range c.Tables {
		p := fmt.Sprintf("tables[%d]", i)
		t, err := ParseTableName(s)
		if err != nil && c.SourceType() == SourceMySQL && bareTableName(s) {
			// A MySQL table may be named without its schema: the database
			// the source URL names (as written: MySQL names are not folded).
			if conn, cerr := ParseMySQLURL(c.Source.Reveal()); cerr == nil {
				t, err = TableName{Schema: conn.Database, Table: strings.TrimSpace(s)}, nil
			}
		}
		if err != nil {
			k.bad(p, "%v", err)
			continue
		}
		if j, dup := seen[t]; dup {
			k.bad(p, "%s is listed twice (also tables[%d])", t, j)
			continue
		}
		seen[t] = i
		for _, part := range [][2]string{{"schema", t.Schema}, {"table", t.Table}} {
			if why := LakeNameProblem(part[0], part[1]); why != "" {
				k.bad(p, "%s: the %s name %q %s; rename it at the source (docs/type-mapping.md, Names)", t, part[0], part[1], why)
				break
			}
		}
	}

	c.validateMergeKeys(k)

	// sizes and intervals
	c.durationDefault("commit_interval", &c.CommitInterval, DefaultCommitInterval)
	k.atLeast("commit_interval", c.CommitInterval, Duration(10*time.Millisecond))
	// memory_budget first: commit_bytes and snapshot.chunk_bytes default
	// to shares of it.
	if c.MemoryBudget == 0 && !c.isSet("memory_budget") {
		c.MemoryBudget = DefaultMemoryBudget
	}
	budgetOK := c.MemoryBudget >= MinMemoryBudget
	if !budgetOK {
		k.bad("memory_budget", "must be at least %s, got %s", ByteSize(MinMemoryBudget), c.MemoryBudget)
	}
	if c.CommitBytes == 0 && !c.isSet("commit_bytes") && budgetOK {
		c.CommitBytes = c.MemoryBudget / CommitShare
	}
	if c.CommitBytes <= 0 && c.isSet("commit_bytes") {
		k.bad("commit_bytes", "must be positive, got %s", c.CommitBytes)
	}
	if c.MaxValueBytes < 0 {
		k.bad("max_value_bytes", "must be 0 (no maximum) or positive, got %s", c.MaxValueBytes)
	}
	switch c.Lake.Format = strings.ToLower(strings.TrimSpace(c.Lake.Format)); c.Lake.Format {
	case "":
		c.Lake.Format = DefaultLakeFormat
	case LakeIceberg:
	case LakeDelta:
		if remote {
			k.bad("lake.format", "delta cannot write an s3:// warehouse yet (Delta tables are written to a local directory only): use lake.format: iceberg with S3, or a local warehouse for Delta")
		}
		if c.Catalog.Reveal() != "" {
			k.bad("catalog", "must be empty with lake.format: delta (a Delta lake has no catalog: its tables are the directories of the warehouse)")
		}
	default:
		k.bad("lake.format", "must be %s or %s, got %q", LakeIceberg, LakeDelta, c.Lake.Format)
	}
	if c.TimeAs == "" {
		c.TimeAs = DefaultTimeAs
	}
	if c.Lake.Format == LakeDelta && c.TimeAs == "time" {
		// Delta has no time-of-day type.
		if c.isSet("time_as") {
			k.bad("time_as", "must be micros or text with lake.format: delta (Delta has no time-of-day type), got %q", c.TimeAs)
		} else {
			c.TimeAs = "micros"
		}
	}
	if !slices.Contains(TimeAsValues, c.TimeAs) {
		k.bad("time_as", "must be one of %s, got %q", strings.Join(TimeAsValues, ", "), c.TimeAs)
	}
	c.durationDefault("heartbeat_interval", &c.HeartbeatInterval, DefaultHeartbeatInterval)
	k.atLeast("heartbeat_interval", c.HeartbeatInterval, Duration(10*time.Millisecond))
	c.durationDefault("publication_poll", &c.PublicationPoll, DefaultPublicationPoll)
	k.atLeast("publication_poll", c.PublicationPoll, Duration(100*time.Millisecond))

	// snapshot
	if c.Snapshot.Enabled == nil {
		t := true
		c.Snapshot.Enabled = &t
	}
	if c.Snapshot.Parallelism == 0 && !c.isSet("snapshot.parallelism") {
		c.Snapshot.Parallelism = DefaultParallelism
	}
	if p := c.Snapshot.Parallelism; p < 1 || p > 64 {
		k.bad("snapshot.parallelism", "must be between 1 and 64, got %d", p)
	}
	if c.Snapshot.ChunkRows == 0 && !c.isSet("snapshot.chunk_rows") {
		c.Snapshot.ChunkRows = DefaultChunkRows
	}
	if c.Snapshot.ChunkRows < 1 {
		k.bad("snapshot.chunk_rows", "must be at least 1, got %d", c.Snapshot.ChunkRows)
	}
	if c.Snapshot.ChunkBytes <= 0 && c.isSet("snapshot.chunk_bytes") {
		k.bad("snapshot.chunk_bytes", "must be positive, got %s", c.Snapshot.ChunkBytes)
	}
	c.checkBudget(k, budgetOK)
	c.validateMySQL(k)

	// silver
	if c.Silver.Enabled == nil {
		t := true
		c.Silver.Enabled = &t
	}
	if c.Silver.SoftDeletes == nil {
		f := false
		c.Silver.SoftDeletes = &f
	}
	c.durationDefault("silver.every", &c.Silver.Every, DefaultSilverEvery)
	k.atLeast("silver.every", c.Silver.Every, Duration(100*time.Millisecond))
	if c.Silver.Buckets == 0 && !c.isSet("silver.buckets") {
		c.Silver.Buckets = DefaultSilverBuckets
	}
	if b := c.Silver.Buckets; b < 0 || b > 4096 {
		k.bad("silver.buckets", "must be between 0 (unpartitioned) and 4096, got %d", b)
	}
	if c.Silver.DeleteMode == "" {
		c.Silver.DeleteMode = DefaultSilverDeleteMode
	}
	if m := c.Silver.DeleteMode; m != "merge-on-read" && m != "copy-on-write" {
		k.bad("silver.delete_mode", "must be merge-on-read or copy-on-write, got %q", m)
	}
	if c.Silver.MaxChanges == 0 && !c.isSet("silver.max_changes") {
		c.Silver.MaxChanges = DefaultSilverMaxChanges
	}
	if c.Silver.MaxChanges < 1000 {
		k.bad("silver.max_changes", "must be at least 1000, got %d", c.Silver.MaxChanges)
	}
	switch m := strings.ToLower(strings.TrimSpace(c.Silver.DropColumn)); m {
	case "":
		c.Silver.DropColumn = DropColumnKeep
	case DropColumnKeep, DropColumnDrop:
		c.Silver.DropColumn = m
	default:
		k.bad("silver.drop_column", "must be %s or %s, got %s", DropColumnKeep, DropColumnDrop, showValue(c.Silver.DropColumn))
	}

	c.validateGold(k)

	// retry
	c.durationDefault("retry.initial_backoff", &c.Retry.InitialBackoff, DefaultInitialBackoff)
	c.durationDefault("retry.max_backoff", &c.Retry.MaxBackoff, DefaultMaxBackoff)
	c.durationDefault("retry.max_elapsed", &c.Retry.MaxElapsed, DefaultMaxElapsed)
	initialOK := k.atLeast("retry.initial_backoff", c.Retry.InitialBackoff, Duration(time.Millisecond))
	if initialOK && c.Retry.MaxBackoff < c.Retry.InitialBackoff {
		k.bad("retry.max_backoff", "must be at least retry.initial_backoff (%s), got %s", c.Retry.InitialBackoff, c.Retry.MaxBackoff)
	}
	if initialOK && c.Retry.MaxElapsed < c.Retry.InitialBackoff {
		k.bad("retry.max_elapsed", "must be at least retry.initial_backoff (%s), got %s", c.Retry.InitialBackoff, c.Retry.MaxElapsed)
	}

	// log
	c.Log.Level = strings.ToLower(strings.TrimSpace(c.Log.Level))
	switch c.Log.Level {
	case "":
		c.Log.Level = DefaultLogLevel
	case "warning":
		c.Log.Level = "warn"
	case "debug", "info", "warn", "error":
	default:
		k.bad("log.level", "must be one of debug, info, warn, error; got %s", showValue(c.Log.Level))
	}
	c.Log.Format = strings.ToLower(strings.TrimSpace(c.Log.Format))
	switch c.Log.Format {
	case "":
		c.Log.Format = DefaultLogFormat
	case "text", "json":
	default:
		k.bad("log.format", "must be text or json; got %s", showValue(c.Log.Format))
	}

	// sink, topic_prefix, kafka
	k.checkSink()
	k.checkLoad(mode == modeLoad)

	// metrics_addr, spool_dir
	if c.MetricsAddr != "" {
		if _, port, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			k.bad("metrics_addr", "must be host:port, e.g. \":9090\" or \"127.0.0.1:9090\"; got %s", showValue(c.MetricsAddr))
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			k.bad("metrics_addr", "port must be a number between 0 and 65535; got %s", showValue(c.MetricsAddr))
		}
	}
	if c.SpoolDir == "" && warehouseOK {
		c.SpoolDir = filepath.Join(c.Warehouse, "_tidemark", "spool")
		if remote {
			// Spilled data is scratch (the lake holds what is acknowledged),
			// and must be on a local disk.
			c.SpoolDir = filepath.Join(os.TempDir(), "tidemark-"+c.Name, "spool")
		}
	}

	if len(k.errs) == 0 {
		return nil
	}
	return errors.Join(k.errs...)
}

// checkBudget defaults snapshot.chunk_bytes from memory_budget and checks
// that the buffers fit in it: commit_bytes plus snapshot.parallelism chunks
// of snapshot.chunk_bytes may take at most half of memory_budget.
func (c *Config) checkBudget(k *checker, budgetOK bool) {
	par := ByteSize(c.Snapshot.Parallelism)
	if !budgetOK || c.CommitBytes <= 0 || par < 1 || par > 64 || c.Snapshot.ChunkBytes < 0 {
		return // reported already
	}
	half := c.MemoryBudget / 2
	if c.Snapshot.ChunkBytes == 0 && !c.isSet("snapshot.chunk_bytes") {
		chunk := c.MemoryBudget / ChunkShare
		if room := (half - c.CommitBytes) / par; room < chunk {
			chunk = room
		}
		c.Snapshot.ChunkBytes = max(chunk, minChunkBytes)
	}
	if c.Snapshot.ChunkBytes == 0 {
		return // reported already
	}
	need := c.CommitBytes + par*c.Snapshot.ChunkBytes
	if need <= half {
		return
	}
	// Blame the most specific setting the user gave.
	path := "memory_budget"
	for _, p := range []string{"snapshot.chunk_bytes", "commit_bytes", "snapshot.parallelism", "memory_budget"} {
		if c.isSet(p) {
			path = p
			break
		}
	}
	k.bad(path, "the buffers do not fit in memory_budget: commit_bytes (%s) + snapshot.parallelism (%d) × snapshot.chunk_bytes (%s) = %s, "+
		"more than half of memory_budget (%s); the other half is for encoding commits, silver's merge and the runtime. "+
		"Lower commit_bytes, snapshot.chunk_bytes or snapshot.parallelism, or raise memory_budget to at least %s",
		c.CommitBytes, par, c.Snapshot.ChunkBytes, need, c.MemoryBudget, 2*need)
}

// durationDefault sets *d to def when it is zero and was not set explicitly.
func (c *Config) durationDefault(path string, d *Duration, def Duration) {
	if *d == 0 && !c.isSet(path) {
		*d = def
	}
}

func (k *checker) atLeast(path string, d, least Duration) bool {
	if d < least {
		k.bad(path, "must be at least %s, got %s", least, d)
		return false
	}
	return true
}

// checkPGName defaults *v to tidemark_<name> and checks it as a
// PostgreSQL object name.
func (c *Config) checkPGName(k *checker, path string, v *string, nameOK bool, re *regexp.Regexp, rule string) {
	derived := false
	if *v == "" {
		if !nameOK {
			return // the name error says it all
		}
		*v, derived = namePrefix+c.Name, true
	}
	switch {
	case derived && len(*v) > maxIdentLen:
		k.bad(path, "the default %q is longer than PostgreSQL's %d bytes; set a shorter name or set %s explicitly", *v, maxIdentLen, path)
	case len(*v) > maxIdentLen:
		k.bad(path, "must be at most %d bytes, got %d", maxIdentLen, len(*v))
	case !re.MatchString(*v):
		k.bad(path, "must match %s (lower-case letters, digits, '_'), got %s", rule, showValue(*v))
	}
}

// bareTableName reports whether s is a table name with no schema, dot or
// quote: what a MySQL tables: entry may be.
func bareTableName(s string) bool {
	s = strings.TrimSpace(s)
	return s != "" && !strings.ContainsAny(s, `."*`)
}

// checkRESTCatalogURL checks an Iceberg REST catalog URL,
// rest+http(s)://[client-id:client-secret@]host:port[/path][?warehouse=NAME],
// without repeating any of it (it may hold a secret).
func checkRESTCatalogURL(s string) error {
	if !strings.HasPrefix(s, "rest+http://") && !strings.HasPrefix(s, "rest+https://") {
		return errors.New("an Iceberg REST catalog URL starts with rest+http:// or rest+https:// (value not shown)")
	}
	u, err := url.Parse(strings.TrimPrefix(s, "rest+"))
	if err != nil || u.Host == "" {
		return errors.New("not a valid REST catalog URL (value not shown): want rest+https://host:port[/path]")
	}
	if u.Port() != "" {
		if n, err := strconv.Atoi(u.Port()); err != nil || n < 1 || n > 65535 {
			return errors.New("the REST catalog URL's port must be between 1 and 65535")
		}
	}
	for k := range u.Query() {
		if k != "warehouse" {
			return fmt.Errorf("the REST catalog URL has an unknown parameter %q (only warehouse= is known)", k)
		}
	}
	return nil
}
