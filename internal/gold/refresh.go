package gold

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/silver"
)

// Snapshot summary keys of every gold commit.
const (
	// PropReads lists, as JSON ([]Read), the silver tables the refresh
	// read: the snapshot of each and the source position it holds.
	PropReads = "tidemark.gold.reads"
	// PropMode is how this commit was computed: ModeFull or
	// ModeIncremental.
	PropMode = "tidemark.gold.mode"
	// PropPlan is how the table is refreshed when it can be: ModeIncremental
	// when its query decomposes (plan.go), else ModeFull.
	PropPlan = "tidemark.gold.plan"
	// PropWhyFull says why a full commit was not incremental.
	PropWhyFull = "tidemark.gold.why-full"
	// PropSQL is the SHA-256 of the SQL the table was computed with.
	PropSQL = "tidemark.gold.sql-sha256"
	// PropPosition and PropWatermark are the lowest of the silver tables
	// read: the gold table reflects every source change up to them.
	PropPosition  = bronze.PropPosition
	PropWatermark = bronze.PropWatermark
)

// Refresh modes.
const (
	// ModeFull: the refresh recomputed the whole query.
	ModeFull = "full"
	// ModeIncremental: the refresh applied the changes of silver since the
	// last refresh (incremental.go).
	ModeIncremental = "incremental"
)

// Spec is one gold table as declared (config gold:).
type Spec struct {
	Name string
	SQL  string
	// Every is the refresh interval; 0: after each silver merge (when a
	// silver table the query reads has a new snapshot).
	Every time.Duration
}

// Ident returns the identifier of gold table name of source.
func Ident(source, name string) []string { return []string{"gold", source, name} }

// Read is one silver table a refresh read.
type Read struct {
	Table     string `json:"table"` // silver.<schema>.<table>
	Snapshot  int64  `json:"snapshot"`
	Position  string `json:"position,omitempty"`
	Watermark string `json:"watermark,omitempty"`
	// Bronze is silver's cursor at Snapshot (the bronze snapshot merged
	// through), Columns a fingerprint of its columns, Filling whether a
	// column's default was still being filled: what the next refresh
	// needs to apply only the changes since (incremental.go).
	Bronze  int64  `json:"bronze_snapshot,omitempty"`
	Columns string `json:"columns,omitempty"`
	Filling bool   `json:"filling,omitempty"`
	// Resnapshot is the last re-snapshot request silver had applied: a
	// re-snapshot replaces silver's rows, including keys no bronze row
	// names (deleted while the capture was cut off).
	Resnapshot string `json:"resnapshot,omitempty"`
}

// Options configure a Refresher.
type Options struct {
	// Source is the source name: gold tables are gold.<source>.<name>, and
	// read silver.<source>.<schema>.<table>.
	Source string
	// Warehouse is the warehouse directory: the refresh state `tidemark
	// status` shows is kept under <warehouse>/_tidemark/gold.
	Warehouse string
	// TempDir holds each refresh's working directory (os.TempDir if empty).
	TempDir string
	// MemoryLimit bounds DuckDB (it spills beyond it) and, again, the
	// result held for the commit.
	MemoryLimit int64
	// Threads of DuckDB (default 1).
	Threads int
	// Exclusive, if set, is held during a refresh: silver's merges and
	// maintenance take turns with it, each bounded by the budget.
	Exclusive sync.Locker
}

// Refresher computes gold tables from silver tables of one catalog.
type Refresher struct {
	cat  lake.Catalog
	opts Options
	log  *slog.Logger
	now  func() time.Time
}

// NewRefresher returns a Refresher of cat.
func NewRefresher(cat lake.Catalog, opts Options, log *slog.Logger) *Refresher {
	return &Refresher{cat: cat, opts: opts, log: log, now: time.Now}
}

// Result is what a refresh did.
type Result struct {
	Table string // gold.<source>.<name>
	Rows  int64
	Reads []Read
	// Mode is how the refresh computed the table (ModeFull,
	// ModeIncremental); WhyFull why it was not incremental, Changed the
	// keys of silver an incremental refresh applied.
	Mode    string
	WhyFull string
	Changed int
	// Waiting, when not empty, says why nothing was computed: a silver
	// table the query reads is not published yet.
	Waiting string
	// Unchanged: no silver table the query reads moved since the last
	// refresh and the SQL is the same, so nothing was committed.
	Unchanged bool
}

// table returns gold.<source>.<name> as a string.
func (r *Refresher) table(s Spec) string { return strings.Join(Ident(r.opts.Source, s.Name), ".") }

// invalid is a configuration error of gold table s.
func (r *Refresher) invalid(s Spec, err error) error {
	return fault.With(fault.ErrGoldInvalid, fmt.Sprintf("gold table %s (gold: entry %q): the sql cannot be used; fix it in the config file and start again", r.table(s), s.Name), err)
}

// failed is a failed refresh of gold table s; a transient cause keeps its
// class (the refresh is retried), any other is gold_refresh_failed.
func (r *Refresher) failed(s Spec, err error) error {
	if fault.ClassOf(err) == fault.Transient || errors.Is(err, fault.ErrGoldInvalid) || ctxErr(err) {
		return err
	}
	return fault.With(fault.ErrGoldRefreshFailed, fmt.Sprintf("gold table %s: refresh failed; the table keeps its previous version", r.table(s)), err)
}

func ctxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// silverTables opens the silver tables refs name. A table that does not
// exist but will (its bronze table or its silver build exists) makes
// waiting say so; one that will not is a configuration error.
func (r *Refresher) silverTables(ctx context.Context, s Spec, refs []TableRef) (tables []lake.Table, waiting string, err error) {
	for _, ref := range refs {
		t, err := r.cat.Open(ctx, silver.Ident(r.opts.Source, ref.Schema, ref.Table))
		if err == nil {
			tables = append(tables, t)
			continue
		}
		if !errors.Is(err, lake.ErrNoSuchTable) {
			return nil, "", err
		}
		for _, id := range [][]string{
			silver.BuildingIdent(r.opts.Source, ref.Schema, ref.Table),
			bronze.Ident(r.opts.Source, change.TableID{Schema: ref.Schema, Name: ref.Table}),
		} {
			if _, err := r.cat.Open(ctx, id); err == nil {
				waiting = fmt.Sprintf("waiting for %s to be published (its initial snapshot is not complete)", ref)
				break
			}
		}
		if waiting == "" {
			known, _ := r.cat.TablesUnder(ctx, []string{"bronze", r.opts.Source})
			if len(known) == 0 {
				// Nothing captured yet: the table may come with the first snapshot.
				waiting = fmt.Sprintf("waiting for %s: nothing of source %s is captured yet", ref, r.opts.Source)
			} else {
				return nil, "", r.invalid(s, fmt.Errorf("%s is not a table of source %s (no silver, building or bronze table %s.%s); check the schema and table name, or add the table to the source's tables", ref, r.opts.Source, ref.Schema, ref.Table))
			}
		}
	}
	return tables, waiting, nil
}

// session opens a DuckDB session in a new working directory; done closes
// it and removes the directory.
func (r *Refresher) session(ctx context.Context, s Spec) (*engine, func(), error) {
	base := r.opts.TempDir
	if base == "" {
		base = os.TempDir()
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp(base, fmt.Sprintf("gold-%d-%s-", os.Getpid(), s.Name))
	if err != nil {
		return nil, nil, err
	}
	e, err := openEngine(ctx, EngineOptions{Dir: dir, MemoryLimit: r.opts.MemoryLimit, Threads: r.opts.Threads})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return e, func() { e.close(); os.RemoveAll(dir) }, nil
}

// RemoveStale removes the working directories that refreshes of processes
// no longer running (killed) left in opts.TempDir.
func RemoveStale(opts Options, log *slog.Logger) {
	if opts.TempDir == "" {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(opts.TempDir, "gold-*"))
	for _, d := range dirs {
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), "gold-"), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			log.Warn("cannot remove a gold refresh's leftover directory", "dir", d, "error", err.Error())
		}
	}
}

// query is s.SQL without trailing semicolons and white space.
func query(s Spec) string {
	return strings.TrimRight(strings.TrimSpace(s.SQL), "; \t\r\n")
}

// Check validates s against the lake, reading no rows: the SQL is one
// SELECT, it names only silver tables of the source, DuckDB accepts it
// against their schemas and gold can store every column of its result.
// A silver table not published yet is not an error (its schema is checked
// at the first refresh). The error is fault.ErrGoldInvalid (exit 2),
// naming the gold table.
func (r *Refresher) Check(ctx context.Context, s Spec) (refs []TableRef, err error) {
	e, done, err := r.session(ctx, s)
	if err != nil {
		return nil, err
	}
	defer done()
	refs, err = e.references(ctx, query(s))
	if err != nil {
		return nil, r.invalid(s, err)
	}
	tables, waiting, err := r.silverTables(ctx, s, refs)
	if err != nil || waiting != "" {
		return refs, err
	}
	if err := r.bindEmpty(ctx, e, tables, refs); err != nil {
		return nil, err
	}
	if _, err := e.describe(ctx, query(s)); err != nil {
		return nil, r.invalid(s, err)
	}
	return refs, nil
}

// bindEmpty makes each silver table of refs an empty view with its
// columns, for DuckDB to bind the query to.
func (r *Refresher) bindEmpty(ctx context.Context, e *engine, tables []lake.Table, refs []TableRef) error {
	for i, t := range tables {
		path := filepath.Join(e.dir, fmt.Sprintf("schema-%d.parquet", i))
		w, err := writeParquet(path, plain(t.ArrowSchema()))
		if err != nil {
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
		if err := e.view(ctx, refs[i], path); err != nil {
			return err
		}
	}
	return nil
}

// Refresh recomputes gold table s from the silver tables as they are now
// and replaces its rows in one commit (see the package documentation). With force false, a
// table whose silver tables have not moved since its last refresh (and
// whose SQL is the same) is left as it is. A failed refresh leaves the
// table's previous version; its state for `tidemark status` is recorded.
func (r *Refresher) Refresh(ctx context.Context, s Spec, force bool) (res Result, err error) {
	res.Table = r.table(s)
	defer func() {
		if err != nil && !ctxErr(err) {
			err = r.failed(s, err)
			r.note(s, err)
		} else if err == nil && res.Waiting == "" && (!res.Unchanged || r.failing(s)) {
			// Up to date: an error recorded before no longer holds.
			r.note(s, nil)
		}
	}()
	e, done, err := r.session(ctx, s)
	if err != nil {
		return res, err
	}
	defer done()
	q := query(s)
	refs, err := e.references(ctx, q)
	if err != nil {
		return res, r.invalid(s, err)
	}
	tables, waiting, err := r.silverTables(ctx, s, refs)
	if err != nil {
		return res, err
	}
	if waiting != "" {
		res.Waiting = waiting
		return res, nil
	}
	gold, err := r.cat.Open(ctx, Ident(r.opts.Source, s.Name))
	if errors.Is(err, lake.ErrNoSuchTable) {
		gold = nil // created by the first refresh, with the result's columns
	} else if err != nil {
		return res, err
	}
	sqlHash := hashSQL(q)
	for i, t := range tables {
		snap, _ := t.CurrentSnapshot()
		rd := Read{Table: refs[i].String(), Snapshot: snap.ID}
		if sum := t.Summary(); sum != nil {
			rd.Position, rd.Watermark = sum[silver.PropPosition], sum[silver.PropWatermark]
			rd.Bronze, _ = strconv.ParseInt(sum[silver.PropBronzeSnapshot], 10, 64)
			rd.Resnapshot = sum[silver.PropResnapshot]
		}
		rd.Columns = columnsHash(t.ArrowSchema())
		rd.Filling = len(silver.FillPending(t)) > 0
		res.Reads = append(res.Reads, rd)
	}
	if !force && gold != nil && !Moved(gold.Summary(), res.Reads, sqlHash) {
		res.Unchanged = true
		return res, nil
	}
	if r.opts.Exclusive != nil {
		r.opts.Exclusive.Lock()
		defer r.opts.Exclusive.Unlock()
	}
	// The query's columns and plan, bound to the silver tables' columns.
	if err := r.bindEmpty(ctx, e, tables, refs); err != nil {
		return res, err
	}
	cols, err := e.describe(ctx, q)
	if err != nil {
		return res, r.invalid(s, err)
	}
	p, why, err := e.analyze(ctx, q, cols)
	if err != nil {
		return res, err
	}
	planned := ModeFull
	if p != nil {
		planned = ModeIncremental
		switch {
		case force:
			why = "a refresh by hand recomputes"
		case gold == nil:
			why = "the first refresh"
		default:
			rows, changed, w, err := r.incremental(ctx, e, s, q, cols, p, tables[0], refs[0], gold, res.Reads[0], sqlHash)
			if err != nil {
				return res, err
			}
			if w == "" {
				res.Rows, res.Mode, res.Changed = rows, ModeIncremental, changed
				r.log.Info("gold table refreshed", "table", res.Table, "rows", rows, "mode", ModeIncremental, "changed_keys", changed, "reads", readsAttr(res.Reads))
				return res, nil
			}
			why = w
		}
	}
	res.Mode, res.WhyFull = ModeFull, why
	// Each silver table's live rows, as of the snapshot just recorded
	// (a table reads the state it loaded), into the session's files.
	for i, t := range tables {
		path := filepath.Join(e.dir, fmt.Sprintf("in-%d.parquet", i))
		if err := copyRows(plain(t.ArrowSchema()), path, func(fn func(arrow.RecordBatch) error) error { return t.Scan(ctx, fn) }); err != nil {
			return res, fmt.Errorf("read %s: %w", refs[i], err)
		}
		if err := e.view(ctx, refs[i], path); err != nil {
			return res, err
		}
	}
	out, err := e.run(ctx, q, cols)
	if err != nil {
		return res, fmt.Errorf("run the sql: %w", err)
	}
	gold, err = r.ensureTable(ctx, gold, s, cols)
	if err != nil {
		return res, err
	}
	recs, rows, err := readResult(ctx, out, gold.ArrowSchema(), r.opts.MemoryLimit)
	if err != nil {
		return res, err
	}
	defer func() {
		for _, b := range recs {
			b.Release()
		}
	}()
	res.Rows = rows
	props := commitProps(res.Reads, sqlHash)
	props[PropPlan] = planned
	if why != "" {
		props[PropWhyFull] = why
	}
	if err := gold.Merge(ctx, lake.And(), recs, props); err != nil {
		return res, err
	}
	r.log.Info("gold table refreshed", "table", res.Table, "rows", rows, "mode", ModeFull, "why_full", why, "reads", readsAttr(res.Reads))
	return res, nil
}

// plain is sc without field metadata (Iceberg field ids): the session's
// files carry only names and types.
func plain(sc *arrow.Schema) *arrow.Schema {
	fs := make([]arrow.Field, sc.NumFields())
	for i, f := range sc.Fields() {
		fs[i] = arrow.Field{Name: f.Name, Type: f.Type, Nullable: true}
	}
	return arrow.NewSchema(fs, nil)
}

// ensureTable returns the gold table with the result's columns: created on
// the first refresh; after the SQL changed, columns it no longer returns (or
// returns with another type) are deleted and new ones added, in a schema
// commit before the data's.
func (r *Refresher) ensureTable(ctx context.Context, gold lake.KeyedTable, s Spec, cols []Column) (lake.KeyedTable, error) {
	fields := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fields[i] = arrow.Field{Name: c.Name, Type: c.Arrow, Nullable: true}
	}
	if gold == nil {
		t, err := r.cat.Create(ctx, Ident(r.opts.Source, s.Name), lake.TableSpec{
			Schema:     arrow.NewSchema(fields, nil),
			DeleteMode: lake.CopyOnWrite,
			Properties: map[string]string{"comment": "tidemark gold table: " + query(s)},
		})
		if errors.Is(err, lake.ErrTableExists) {
			return r.cat.Open(ctx, Ident(r.opts.Source, s.Name))
		}
		return t, err
	}
	have := gold.ArrowSchema()
	var ev lake.Evolution
	for _, f := range have.Fields() {
		i := slices.IndexFunc(fields, func(n arrow.Field) bool { return n.Name == f.Name })
		if i < 0 || !lake.SameType(fields[i].Type, f.Type) {
			ev.Delete = append(ev.Delete, f.Name)
		}
	}
	for _, f := range fields {
		i := have.FieldIndices(f.Name)
		if len(i) == 0 || slices.Contains(ev.Delete, f.Name) {
			ev.Add = append(ev.Add, f)
		}
	}
	if len(ev.Delete) == 0 && len(ev.Add) == 0 {
		return gold, nil
	}
	if err := gold.Evolve(ctx, ev); err != nil {
		return nil, fmt.Errorf("change the table's columns to the query's: %w", err)
	}
	return gold, nil
}

func hashSQL(q string) string {
	h := sha256.Sum256([]byte(q))
	return hex.EncodeToString(h[:])
}

// commitProps are the snapshot properties of a refresh that read reads.
func commitProps(reads []Read, sqlHash string) map[string]string {
	js, _ := json.Marshal(reads)
	props := map[string]string{PropReads: string(js), PropMode: ModeFull, PropSQL: sqlHash}
	var minPos uint64
	var minWM string
	for i, rd := range reads {
		p, err := strconv.ParseUint(rd.Position, 10, 64)
		if err == nil && (i == 0 || p < minPos) {
			minPos = p
		}
		if rd.Watermark != "" && (minWM == "" || rd.Watermark < minWM) {
			minWM = rd.Watermark
		}
	}
	if minPos > 0 {
		props[PropPosition] = strconv.FormatUint(minPos, 10)
	}
	if minWM != "" {
		props[PropWatermark] = minWM
	}
	return props
}

// Reads returns the silver tables a gold commit's summary says it read.
func Reads(sum map[string]string) []Read {
	var reads []Read
	_ = json.Unmarshal([]byte(sum[PropReads]), &reads)
	return reads
}

// Moved reports whether a refresh is due for a gold table whose current
// summary is sum: the SQL changed, or a silver table in now has another
// snapshot than the one the table was computed from.
func Moved(sum map[string]string, now []Read, sqlHash string) bool {
	if sum == nil || sum[PropSQL] != sqlHash {
		return true
	}
	was := map[string]int64{}
	for _, rd := range Reads(sum) {
		was[rd.Table] = rd.Snapshot
	}
	for _, rd := range now {
		if s, ok := was[rd.Table]; !ok || s != rd.Snapshot {
			return true
		}
	}
	return false
}

func readsAttr(reads []Read) string {
	parts := make([]string, len(reads))
	for i, rd := range reads {
		parts[i] = fmt.Sprintf("%s@%d", rd.Table, rd.Snapshot)
	}
	return strings.Join(parts, ",")
}
