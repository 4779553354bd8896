package bronze

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	icebergtable "github.com/apache/iceberg-go/table"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/coltype"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// maxBatchRows caps one Arrow record; a flush may commit several.
const maxBatchRows = 64 * 1024

// checkpointAttempts bounds the tries to record a flush's checkpoint.
const checkpointAttempts = 5

// Special table names inside bronze.<source>.
const (
	DeadLetterTable = "_dead_letter"
	MessagesTable   = "_messages"
)

// Namespace returns the catalog namespace of a source table's bronze table.
func Namespace(source, schema string) []string { return []string{"bronze", source, schema} }

// Ident returns the identifier of a source table's bronze table.
func Ident(source string, t change.TableID) []string {
	return append(Namespace(source, t.Schema), t.Name)
}

// Tables returns the source tables that have a bronze table in pipeline
// source, sorted by schema then name.
func Tables(ctx context.Context, cat interface {
	TablesUnder(ctx context.Context, prefix []string) ([][]string, error)
}, source string) ([]change.TableID, error) {
	ids, err := cat.TablesUnder(ctx, SourceNamespace(source))
	if err != nil {
		return nil, err
	}
	out := make([]change.TableID, 0, len(ids))
	for _, id := range ids {
		out = append(out, change.TableID{Schema: id[2], Name: id[3]})
	}
	return out, nil
}

// SourceNamespace is bronze.<source>, which holds the checkpoint and the
// _messages and _dead_letter tables.
func SourceNamespace(source string) []string { return []string{"bronze", source} }

// Writer buffers changes per table and commits them. Not safe for
// concurrent use: one capture stream goroutine owns it. A Writer whose
// Flush failed must be discarded (its buffers are in an unknown state);
// the next session builds a new one from what the lake holds.
type Writer struct {
	cat       lake.Catalog
	source    string
	slot      string
	log       *slog.Logger
	mem       memory.Allocator
	tables    map[change.TableID]*tableBuf
	order     []change.TableID
	dead      *tableBuf
	msgs      *tableBuf
	buffered  int64
	committed int64
	inBatch   bool // writing snapshot rows: they do not move the cursor
	// keepReplays: Write keeps changes at or below a table's cursor
	// (KeepReplays).
	keepReplays bool
	now         func() time.Time
	// obs is told what commits held (observe.go; nil: nothing is counted);
	// deadObs holds the observers of tables only dead letters named.
	obs     Observer
	deadObs map[change.TableID]TableObserver

	// flushing is the flush running in the background, or finished and not
	// yet collected by FinishFlush (nil: none).
	flushing *flushJob
}

// Committed is the number of rows committed by this Writer.
func (w *Writer) Committed() int64 { return w.committed }

var _ pipeline.BackgroundSink = (*Writer)(nil)

// NewWriter creates bronze.<source>, its _messages and _dead_letter tables
// (or loads them), before any data moves.
func NewWriter(ctx context.Context, cat lake.Catalog, source, slot string, log *slog.Logger) (*Writer, error) {
	w := &Writer{cat: cat, source: source, slot: slot, log: log, mem: memory.DefaultAllocator,
		tables: map[change.TableID]*tableBuf{}, now: time.Now}
	if err := cat.EnsureNamespace(ctx, SourceNamespace(source)); err != nil {
		return nil, fmt.Errorf("bronze: create namespace bronze.%s: %w", source, err)
	}
	var err error
	if w.dead, err = w.openSpecial(ctx, DeadLetterTable, deadLetterSchema()); err != nil {
		return nil, err
	}
	if w.msgs, err = w.openSpecial(ctx, MessagesTable, messagesSchema()); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Writer) openSpecial(ctx context.Context, name string, sch *iceberg.Schema) (*tableBuf, error) {
	ident := append(SourceNamespace(w.source), name)
	tbl, err := loadOrCreate(ctx, w.cat, ident, sch, nil)
	if err != nil {
		return nil, err
	}
	return newTableBuf(ident, tbl, w.mem)
}

func loadOrCreate(ctx context.Context, cat lake.Catalog, ident []string, sch *iceberg.Schema, props map[string]string) (lake.Table, error) {
	asc, err := icebergtable.SchemaToArrowSchema(sch, nil, false, false)
	if err != nil {
		return nil, fmt.Errorf("bronze: table %s: its columns as Arrow: %w", strings.Join(ident, "."), err)
	}
	var tbl lake.Table
	tbl, err = cat.Open(ctx, ident)
	if errors.Is(err, lake.ErrNoSuchTable) {
		tbl, err = cat.Create(ctx, ident, lake.TableSpec{Schema: asc, DayPartition: ColTS, Properties: props})
		if errors.Is(err, lake.ErrTableExists) {
			tbl, err = cat.Open(ctx, ident)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bronze: open table %s: %w", strings.Join(ident, "."), err)
	}
	return tbl, nil
}

// tableProperties are the properties of a new bronze table. Parquet
// dictionary encoding is off: bronze is written once and read in bulk, most
// of its columns are unique per row (positions, times, keys), and the
// dictionary encoder copies every value into its memo table before it
// finds the dictionary too large, which tripled the memory a 16 MiB value
// costs at commit and cost 5% of the CPU of a TPC-B stream. That includes
// cdc_op: its dictionary saved bytes zstd saves anyway (a page of "r" or of
// a few ops compresses to almost nothing) but hashed every row, boxing
// each value (~15% of the CPU of a snapshot commit). Tables created
// before keep the property they were created with.
func tableProperties(key string) map[string]string {
	return map[string]string{
		PropKey:                     key,
		"parquet.enable.dictionary": "false",
	}
}

// tableBuf is one bronze table and the rows waiting for its next commit.
type tableBuf struct {
	ident  []string
	tbl    lake.Table
	sch    *arrow.Schema
	b      *array.RecordBuilder
	field  map[string]int
	cdc    cdcIdx // builder indexes of the metadata columns
	layout map[*change.Schema]*layout
	recs   []arrow.RecordBatch
	rows   int
	bytes  int64

	cursor  change.Position // committed
	pending change.Position // highest buffered
	props   map[string]string
	dirty   bool // props changed since the last commit

	// armed: columns whose missing value is written into rows that lack
	// them; seen: columns a row has carried (defaults.go).
	armed     map[string]any
	seen      map[string]bool
	firstSeen map[string]change.Position
	missing   map[string]any // every missing value OpenTable was told of

	// With an observer (observe.go): its observer, the buffered rows by
	// operation, the transactions they belong to, and (dead-letter table)
	// the dead letters buffered per source table.
	obs    TableObserver
	ops    [NumOps]int64
	chunks int64 // snapshot chunks with rows
	txs    []txAt
	txLSN  uint64
	dead   map[change.TableID]int64
}

// cdcIdx are the builder indexes of the metadata columns (-1: the table has
// no such column), looked up once per schema rather than once per row.
type cdcIdx struct{ op, ts, processedAt, lsn, txID, seq, unchanged int }

type layout struct {
	idx     []int // change field i -> builder field
	missing []int // builder source fields no change field fills
	fill    []fill
}

// fill is a builder source field no change field fills that gets its
// missing value (defaults.go).
type fill struct {
	j int
	v any
}

func newTableBuf(ident []string, tbl lake.Table, mem memory.Allocator) (*tableBuf, error) {
	tb := &tableBuf{ident: ident, tbl: tbl, props: map[string]string{}, armed: map[string]any{}, seen: map[string]bool{},
		firstSeen: map[string]change.Position{}, missing: map[string]any{}}
	sum := tbl.Summary()
	for k, v := range sum {
		if strings.HasPrefix(k, "tidemark.") {
			tb.props[k] = v
		}
	}
	if c := sum[PropCursor]; c != "" {
		pos, err := parseCursor(c)
		if err != nil {
			return nil, fault.With(fault.ErrCorruptState, fmt.Sprintf("bronze table %s: cannot read its cursor %q from the latest snapshot summary", strings.Join(ident, "."), c), err)
		}
		tb.cursor, tb.pending = pos, pos
	}
	tb.reset(mem)
	return tb, nil
}

func (tb *tableBuf) reset(mem memory.Allocator) {
	if tb.b != nil {
		tb.b.Release()
	}
	tb.sch = tb.tbl.ArrowSchema()
	tb.b = array.NewRecordBuilder(mem, tb.sch)
	tb.field = map[string]int{}
	for i, f := range tb.sch.Fields() {
		tb.field[f.Name] = i
	}
	idx := func(name string) int {
		if i, ok := tb.field[name]; ok {
			return i
		}
		return -1
	}
	tb.cdc = cdcIdx{op: idx(ColOp), ts: idx(ColTS), processedAt: idx(ColProcessedAt), lsn: idx(ColLSN),
		txID: idx(ColTxID), seq: idx(ColSeq), unchanged: idx(ColUnchanged)}
	tb.layout = map[*change.Schema]*layout{}
}

func (tb *tableBuf) name() string { return strings.Join(tb.ident, ".") }

func parseCursor(s string) (change.Position, error) {
	l, q, ok := strings.Cut(s, ":")
	if !ok {
		return change.Position{}, fmt.Errorf("want <lsn>:<seq>")
	}
	lsn, err := strconv.ParseUint(l, 10, 64)
	if err != nil {
		return change.Position{}, err
	}
	seq, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		return change.Position{}, err
	}
	return change.Position{LSN: lsn, Seq: seq}, nil
}

func formatCursor(p change.Position) string {
	return strconv.FormatUint(p.LSN, 10) + ":" + strconv.FormatInt(p.Seq, 10)
}

// OpenTable implements pipeline.Sink.
func (w *Writer) OpenTable(ctx context.Context, id change.TableID, s *change.Schema) (pipeline.TableState, error) {
	tb, ok := w.tables[id]
	if !ok {
		ident := Ident(w.source, id)
		props := tableProperties(keyProperty(s.Key))
		if ids := schemaIDs(s); len(ids) > 0 {
			props[PropColumnIDs] = EncodeColumnIDs(ids)
		}
		tbl, err := loadOrCreate(ctx, w.cat, ident, tableSchema(s), props)
		if err != nil {
			return pipeline.TableState{}, err
		}
		if tb, err = newTableBuf(ident, tbl, w.mem); err != nil {
			return pipeline.TableState{}, err
		}
		if _, ok := tbl.CurrentSnapshot(); !ok {
			// A table created in place of one `resnapshot --replace` moved
			// away: its first commit records where its stream starts.
			before, err := w.replacedBefore(ctx, id)
			if err != nil {
				return pipeline.TableState{}, err
			}
			if before != "" {
				tb.props[PropReplacedBefore] = before
				tb.dirty = true
			}
		}
		if w.obs != nil {
			tb.obs = w.tableObserver(id)
			if o, ok := tb.obs.(OpenObserver); ok && len(tb.props) > 0 {
				o.Opened(maps.Clone(tb.props))
			}
		}
		w.tables[id] = tb
		w.order = append(w.order, id)
	}
	if err := checkKey(ctx, id, tb, s); err != nil {
		return pipeline.TableState{}, err
	}
	if err := tb.settleKey(ctx); err != nil {
		return pipeline.TableState{}, err
	}
	if err := w.evolve(ctx, id, tb, s); err != nil {
		return pipeline.TableState{}, err
	}
	tb.arm(s)
	props := map[string]string{}
	for k, v := range tb.props {
		props[k] = v
	}
	if ids := tb.tbl.Properties()[PropColumnIDs]; ids != "" {
		props[PropColumnIDs] = ids
	}
	return pipeline.TableState{Cursor: tb.cursor, Props: props}, nil
}

// checkKey refuses a source key that differs from the one the bronze table
// was created with: silver merges by key, and bronze rows of both keys in
// one table cannot be replayed into one replica.
//
// A keyless table (tidemark.key = []) that gets a key records it: under
// REPLICA IDENTITY DEFAULT or NOTHING its changes so far are inserts and
// truncates, which replay by any key (docs/silver.md, "Tables without a
// primary key").
func checkKey(ctx context.Context, id change.TableID, tb *tableBuf, s *change.Schema) error {
	if len(s.Key) == 0 {
		return nil
	}
	was := tb.effectiveKey() // the latest key change's (rekey.go), else the table's
	if was == "" {
		return nil
	}
	var old []string
	if err := json.Unmarshal([]byte(was), &old); err != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("bronze table %s: table property %s is unreadable", tb.name(), PropKey), err)
	}
	if strings.Join(old, "\x00") == strings.Join(s.Key, "\x00") {
		return nil
	}
	if old != nil && len(old) == 0 {
		if err := tb.tbl.SetProperties(ctx, map[string]string{PropKey: keyProperty(s.Key)}); err != nil {
			return fmt.Errorf("bronze table %s: record its key %v: %w", tb.name(), s.Key, err)
		}
		return nil
	}
	return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf(
		"table %s: its key changed from %v to %v since %s was created; changes by the new key cannot be merged with the old ones. "+
			"Restore the old key, or rebuild the table on its new key with `tidemark resnapshot --replace %s` (docs/operations.md, Schema changes)", id, old, s.Key, tb.name(), id), nil)
}

// evolve makes the bronze table hold every field of s: renamed columns
// (by the source's column id, PropColumnIDs) are renamed, new columns are
// added, widened types widened; anything else is an incompatible change.
func (w *Writer) evolve(ctx context.Context, id change.TableID, tb *tableBuf, s *change.Schema) error {
	// The table's columns in the source model's types (change.Field.Type),
	// whatever the format.
	cur, err := icebergtable.ArrowSchemaToIcebergWithFreshIDs(tb.tbl.ArrowSchema(), false)
	if err != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("bronze table %s: its columns", tb.name()), err)
	}
	ids, err := ColumnIDs(tb.tbl.Properties())
	if err != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("bronze table %s", tb.name()), err)
	}
	var have, want []string
	for _, f := range cur.Fields() {
		if !strings.HasPrefix(f.Name, "cdc_") {
			have = append(have, f.Name)
		}
	}
	for _, f := range s.Fields {
		want = append(want, f.Name)
	}
	renames, nextIDs := Renames(have, ids, want, schemaIDs(s))
	renamedTo := map[string]string{}
	for _, r := range renames {
		renamedTo[r.To] = r.From
	}
	readded := readdedColumns(have, ids, s, renamedTo)
	var add []iceberg.NestedField
	type widen struct {
		name string
		to   iceberg.Type
	}
	var widens []widen
	for _, f := range s.Fields {
		name := f.Name
		if old, ok := renamedTo[f.Name]; ok {
			name = old
		}
		have, ok := cur.FindFieldByName(name)
		if !ok || slices.Contains(readded, f.Name) {
			add = append(add, iceberg.NestedField{Name: f.Name, Type: f.Type})
			continue
		}
		if have.Type.Equals(f.Type) || coltype.CanWiden(f.Type, have.Type) {
			continue
		}
		if coltype.CanWiden(have.Type, f.Type) {
			widens = append(widens, widen{f.Name, f.Type})
			continue
		}
		if timeAsChanged(have.Type, f) {
			return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf(
				"table %s column %q (%s at the source) is %s in bronze %s but lands as %s now: the setting time_as "+
					"(time, text or micros) differs from the one the table was built under, and the two forms are not mixed in one table. "+
					"Set time_as back to what it was, or rebuild the table under the current setting "+
					"with `tidemark resnapshot --replace %s` (docs/type-mapping.md, time columns and Spark)",
				id, f.Name, f.SourceType, have.Type, tb.name(), f.Type, id), nil)
		}
		return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf(
			"table %s column %q changed type from %s to %s (%s at the source), which Iceberg cannot evolve: "+
				"bronze %s keeps its old type. Restore the type at the source, or rebuild the table under its new schema "+
				"with `tidemark resnapshot --replace %s` (docs/operations.md, Schema changes)",
			id, f.Name, have.Type, f.Type, f.SourceType, tb.name(), id), nil)
	}
	idsChanged := len(nextIDs) != len(ids)
	for n, v := range nextIDs {
		idsChanged = idsChanged || ids[n] != v
	}
	wasDropped, err := DroppedColumns(tb.tbl.Properties())
	if err != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("bronze table %s", tb.name()), err)
	}
	dropped := droppedAfter(have, wasDropped, ids, s, renames)
	dropChanged := encodeDropped(dropped) != encodeDropped(wasDropped)
	if dropChanged {
		for _, n := range dropped {
			if !slices.Contains(wasDropped, n) {
				w.log.Info("bronze column dropped at the source: kept in bronze, NULL in rows written from now on", "table", tb.name(), "column", n)
			}
		}
	}
	if len(add) == 0 && len(widens) == 0 && len(renames) == 0 {
		props := map[string]string{}
		if idsChanged {
			// Ids learnt for columns the table has (a table created before
			// ids were recorded): no schema change, no rows to commit first.
			props[PropColumnIDs] = EncodeColumnIDs(nextIDs)
		}
		if dropChanged {
			// Nor for a dropped column: bronze keeps it.
			props[PropDroppedColumns] = encodeDropped(dropped)
		}
		if len(props) > 0 {
			if err := tb.tbl.SetProperties(ctx, props); err != nil {
				return fmt.Errorf("bronze table %s: record column ids and dropped columns: %w", tb.name(), err)
			}
		}
		return nil
	}
	// Rows already buffered were built for the old schema: commit them
	// first, after any flush in flight (which may hold older rows of tb).
	if err := w.waitFlush(); err != nil {
		return err
	}
	if err := w.commitTable(ctx, tb, nil); err != nil {
		return err
	}
	idProps := map[string]string{PropColumnIDs: EncodeColumnIDs(nextIDs)}
	if dropChanged {
		idProps[PropDroppedColumns] = encodeDropped(dropped)
	}
	if len(readded) > 0 {
		// The old column goes first (its values stay in the data files, for
		// a time-travel read), then the new one is added below, with a new
		// field id: null in every older row, or its recorded default. A
		// crash in between leaves the column missing: added at the restart.
		props := map[string]string{}
		tb.forgetDefaults(readded, props)
		if err := tb.tbl.Evolve(ctx, lake.Evolution{Delete: readded, DeleteProps: props}); err != nil {
			return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("table %s: delete from %s the columns dropped and added again %v", id, tb.name(), readded), err)
		}
		for _, n := range readded {
			w.log.Info("bronze column dropped and added again at the source: the old column is deleted, a new one added", "table", tb.name(), "column", n)
		}
	}
	if len(renames) > 0 {
		props := maps.Clone(idProps)
		if err := tb.renameDefaults(renames, props); err != nil {
			return err
		}
		if err := tb.tbl.Evolve(ctx, lake.Evolution{Rename: renames, RenameProps: props}); err != nil {
			return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("table %s: rename columns of %s", id, tb.name()), err)
		}
		for _, r := range renames {
			w.log.Info("bronze column renamed", "table", tb.name(), "column", r.From, "to", r.To)
		}
	}
	if len(add) > 0 {
		note, err := w.defaultsNote(tb, s, add)
		if err != nil {
			return err
		}
		withIDs := func(snap int64) map[string]string {
			props := map[string]string{}
			if note != nil {
				props = note(snap)
				if props == nil {
					props = map[string]string{}
				}
			}
			maps.Copy(props, idProps)
			return props
		}
		fields := make([]arrow.Field, 0, len(add))
		for _, f := range add {
			at, err := icebergtable.TypeToArrowType(f.Type, false, false)
			if err != nil {
				return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("table %s: column %s of %s: no Arrow type for %s", id, f.Name, tb.name(), f.Type), err)
			}
			fields = append(fields, arrow.Field{Name: f.Name, Type: at, Nullable: true})
		}
		if err := tb.tbl.Evolve(ctx, lake.Evolution{Add: fields, Note: withIDs}); err != nil {
			return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("table %s: add columns to %s", id, tb.name()), err)
		}
		for _, f := range add {
			w.log.Info("bronze column added", "table", tb.name(), "column", f.Name, "type", f.Type.String())
		}
	} else if (idsChanged || dropChanged) && len(renames) == 0 {
		if err := tb.tbl.SetProperties(ctx, idProps); err != nil {
			return fmt.Errorf("bronze table %s: record column ids: %w", tb.name(), err)
		}
	}
	for _, wd := range widens {
		at, err := icebergtable.TypeToArrowType(wd.to, false, false)
		if err == nil {
			err = tb.tbl.Evolve(ctx, lake.Evolution{Widen: []arrow.Field{{Name: wd.name, Type: at, Nullable: true}}})
		}
		if err != nil {
			return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("table %s: widen column %q of %s to %s", id, wd.name, tb.name(), wd.to), err)
		}
		w.log.Info("bronze column widened", "table", tb.name(), "column", wd.name, "type", wd.to.String())
	}
	tb.reset(w.mem)
	return nil
}

// timeAsChanged reports whether a PostgreSQL time column's lake type
// differs from the bronze table's because config time_as changed (time,
// text and micros land as time, string and long; a list of them for
// time[]), rather than because the source's type did.
func timeAsChanged(have iceberg.Type, f change.Field) bool {
	if !strings.HasPrefix(f.SourceType, "time") || !strings.Contains(f.SourceType, "without time zone") {
		return false
	}
	elem := func(t iceberg.Type) iceberg.Type {
		if l, ok := t.(*iceberg.ListType); ok {
			return l.Element
		}
		return t
	}
	isTimeForm := func(t iceberg.Type) bool {
		t = elem(t)
		return t.Equals(iceberg.PrimitiveTypes.Time) || t.Equals(iceberg.PrimitiveTypes.String) || t.Equals(iceberg.PrimitiveTypes.Int64)
	}
	return isTimeForm(have) && isTimeForm(f.Type)
}

// layout is tb.layoutFor(s), evolving the table first when s has columns
// (or wider types) the table lacks.
// pos is the position of the first row written with it.
func (w *Writer) layout(ctx context.Context, id change.TableID, tb *tableBuf, s *change.Schema, pos change.Position) (*layout, error) {
	l, err := tb.layoutFor(s, pos)
	if err == nil {
		return l, nil
	}
	if err := w.evolve(ctx, id, tb, s); err != nil {
		return nil, err
	}
	return tb.layoutFor(s, pos)
}

func (tb *tableBuf) layoutFor(s *change.Schema, pos change.Position) (*layout, error) {
	if l, ok := tb.layout[s]; ok {
		return l, nil
	}
	tb.noteSeen(s, pos)
	l := &layout{idx: make([]int, len(s.Fields))}
	used := map[int]bool{}
	for i, f := range s.Fields {
		j, ok := tb.field[f.Name]
		if !ok {
			return nil, fmt.Errorf("bronze table %s has no column %q (table not opened with this schema)", tb.name(), f.Name)
		}
		l.idx[i] = j
		used[j] = true
	}
	for name, j := range tb.field {
		if !used[j] && !strings.HasPrefix(name, "cdc_") {
			if v, ok := tb.armed[name]; ok {
				l.fill = append(l.fill, fill{j, v})
			} else {
				l.missing = append(l.missing, j)
			}
		}
	}
	tb.layout[s] = l
	return l, nil
}

// Write implements pipeline.Sink.
func (w *Writer) Write(ctx context.Context, c *change.Change) error {
	tb, ok := w.tables[c.Table]
	if !ok {
		return fmt.Errorf("bronze: change for table %s before OpenTable", c.Table)
	}
	// Replayed stream changes at or below the cursor were committed before
	// a restart. Snapshot rows are never replayed (a chunk is read afresh
	// and committed with its progress), and sit at their low watermark's
	// position, which may be below the cursor.
	if c.Op != change.OpRead && !w.keepReplays && !tb.cursor.Less(c.Pos) {
		return nil
	}
	l, err := w.layout(ctx, c.Table, tb, c.Schema, c.Pos)
	if err != nil {
		return err
	}
	n, err := w.appendRow(tb, l, c)
	if err != nil {
		return fmt.Errorf("bronze: table %s at %s: %w", tb.name(), c.Pos, err)
	}
	tb.bytes += n
	w.buffered += n
	if tb.obs != nil {
		tb.noteTx(c)
	}
	return nil
}

func (w *Writer) appendRow(tb *tableBuf, l *layout, c *change.Change) (int64, error) {
	b := tb.b
	var n int64 = 64
	for i, v := range c.Values {
		if i >= len(l.idx) {
			break
		}
		if err := appendValue(b.Field(l.idx[i]), v); err != nil {
			return 0, fmt.Errorf("column %q: %w", c.Schema.Fields[i].Name, err)
		}
		n += valueSize(v)
	}
	for i := len(c.Values); i < len(l.idx); i++ {
		b.Field(l.idx[i]).AppendNull()
	}
	for _, j := range l.missing {
		b.Field(j).AppendNull()
	}
	for _, f := range l.fill {
		if err := appendValue(b.Field(f.j), f.v); err != nil {
			return 0, fmt.Errorf("column %q (its default): %w", tb.sch.Field(f.j).Name, err)
		}
		n += valueSize(f.v)
	}
	x := tb.cdc
	b.Field(x.op).(*array.StringBuilder).Append(c.Op.String())
	b.Field(x.ts).(*array.TimestampBuilder).Append(arrow.Timestamp(c.CommitTime.UnixMicro()))
	b.Field(x.processedAt).(*array.TimestampBuilder).Append(arrow.Timestamp(w.now().UnixMicro()))
	b.Field(x.lsn).(*array.Int64Builder).Append(int64(c.Pos.LSN))
	b.Field(x.txID).(*array.Int64Builder).Append(c.TxID)
	b.Field(x.seq).(*array.Int64Builder).Append(c.Pos.Seq)
	lb := b.Field(x.unchanged).(*array.ListBuilder)
	lb.Append(true)
	vb := lb.ValueBuilder().(*array.StringBuilder)
	for _, u := range c.Unchanged {
		vb.Append(u)
	}
	w.noteRow(tb, c.Pos)
	return n, nil
}

func (w *Writer) noteRow(tb *tableBuf, pos change.Position) {
	tb.rows++
	if tb.pending.Less(pos) && !w.inBatch {
		tb.pending = pos
	}
	if tb.b.Field(0).Len() >= maxBatchRows {
		tb.recs = append(tb.recs, tb.b.NewRecordBatch())
	}
}

// appendValue appends v, converting to a wider builder type when the table
// was widened (int -> long, float -> double).
func appendValue(fb array.Builder, v any) error {
	switch x := v.(type) {
	case int32:
		if b, ok := fb.(*array.Int64Builder); ok {
			b.Append(int64(x))
			return nil
		}
	case float32:
		if b, ok := fb.(*array.Float64Builder); ok {
			b.Append(float64(x))
			return nil
		}
	}
	return coltype.AppendValue(fb, v)
}

func valueSize(v any) int64 {
	switch x := v.(type) {
	case string:
		return int64(len(x)) + 16
	case []byte:
		return int64(len(x)) + 24
	case []any:
		var n int64 = 24
		for _, e := range x {
			n += valueSize(e)
		}
		return n
	}
	return 8
}

// WriteBatch implements pipeline.Sink.
func (w *Writer) WriteBatch(ctx context.Context, id change.TableID, cs []*change.Change, props map[string]string) error {
	tb, ok := w.tables[id]
	if !ok {
		return fmt.Errorf("bronze: batch for table %s before OpenTable", id)
	}
	w.inBatch = true
	defer func() { w.inBatch = false }()
	for _, c := range cs {
		if err := w.Write(ctx, c); err != nil {
			return err
		}
	}
	if len(cs) > 0 {
		tb.chunks++
	}
	tb.noteProgress(props)
	return nil
}

// noteProgress records props (snapshot progress) for tb's next commit,
// which then commits even without rows.
func (tb *tableBuf) noteProgress(props map[string]string) {
	maps.Copy(tb.props, props)
	tb.dirty = true
}

// DeadLetter implements pipeline.Sink.
func (w *Writer) DeadLetter(ctx context.Context, d change.DeadLetter) error {
	tb := w.dead
	if d.Op != change.OpRead && !w.keepReplays && !tb.cursor.Less(d.Pos) {
		return nil
	}
	b := tb.b
	b.Field(tb.field[ColTable]).(*array.StringBuilder).Append(d.Table.String())
	b.Field(tb.field[ColOp]).(*array.StringBuilder).Append(d.Op.String())
	b.Field(tb.field[ColError]).(*array.StringBuilder).Append(d.Error)
	b.Field(tb.field[ColRaw]).(*array.StringBuilder).Append(d.Raw)
	b.Field(tb.field[ColTS]).(*array.TimestampBuilder).Append(arrow.Timestamp(d.CommitTime.UnixMicro()))
	b.Field(tb.field[ColProcessedAt]).(*array.TimestampBuilder).Append(arrow.Timestamp(w.now().UnixMicro()))
	b.Field(tb.field[ColLSN]).(*array.Int64Builder).Append(int64(d.Pos.LSN))
	b.Field(tb.field[ColTxID]).(*array.Int64Builder).Append(d.TxID)
	b.Field(tb.field[ColSeq]).(*array.Int64Builder).Append(d.Pos.Seq)
	w.noteRow(tb, d.Pos)
	if w.obs != nil {
		if tb.dead == nil {
			tb.dead = map[change.TableID]int64{}
		}
		tb.dead[d.Table]++
	}
	n := int64(len(d.Raw) + len(d.Error) + 64)
	tb.bytes += n
	w.buffered += n
	w.log.Warn("row sent to the dead-letter table", "table", d.Table.String(), "position", d.Pos.String(), "error", d.Error)
	return nil
}

// Message implements pipeline.Sink.
func (w *Writer) Message(ctx context.Context, m change.Message) error {
	tb := w.msgs
	if !w.keepReplays && !tb.cursor.Less(m.Pos) {
		return nil
	}
	b := tb.b
	b.Field(tb.field[ColPrefix]).(*array.StringBuilder).Append(m.Prefix)
	b.Field(tb.field[ColContent]).(*array.BinaryBuilder).Append(m.Content)
	if utf8.Valid(m.Content) {
		b.Field(tb.field[ColContentText]).(*array.StringBuilder).Append(string(m.Content))
	} else {
		b.Field(tb.field[ColContentText]).AppendNull()
	}
	b.Field(tb.field[ColTransactional]).(*array.BooleanBuilder).Append(m.Transactional)
	ts := m.CommitTime
	if ts.IsZero() {
		ts = w.now()
	}
	b.Field(tb.field[ColTS]).(*array.TimestampBuilder).Append(arrow.Timestamp(ts.UnixMicro()))
	b.Field(tb.field[ColProcessedAt]).(*array.TimestampBuilder).Append(arrow.Timestamp(w.now().UnixMicro()))
	b.Field(tb.field[ColLSN]).(*array.Int64Builder).Append(int64(m.Pos.LSN))
	b.Field(tb.field[ColTxID]).(*array.Int64Builder).Append(m.TxID)
	b.Field(tb.field[ColSeq]).(*array.Int64Builder).Append(m.Pos.Seq)
	w.noteRow(tb, m.Pos)
	n := int64(len(m.Content) + len(m.Prefix) + 64)
	tb.bytes += n
	w.buffered += n
	return nil
}

// Buffered implements pipeline.Sink.
func (w *Writer) Buffered() int64 { return w.buffered }

// pendingCommit is one table's share of a flush: the rows and props taken
// from its buffer, committed by whichever goroutine runs the flush.
type pendingCommit struct {
	tb     *tableBuf
	recs   []arrow.RecordBatch
	props  map[string]string
	cursor change.Position // tb.pending when detached: the cursor once committed
	rows   int
	// For the observer (observe.go): rows by operation, the transactions
	// the commit completes, dead letters by source table, and the bytes of
	// the files it added (set once committed).
	ops       [NumOps]int64
	chunks    int64
	txs       []int64 // source commit times, Unix µs
	dead      map[change.TableID]int64
	fileBytes int64
}

// detach takes tb's buffered rows and props out of its buffer, for a
// commit with cp's position (cp == nil: a commit forced by schema evolution
// that does not move the position). nil when there is nothing to commit.
// Stream goroutine only.
func (w *Writer) detach(tb *tableBuf, cp *pipeline.Checkpoint) *pendingCommit {
	if tb.b.Field(0).Len() > 0 {
		tb.recs = append(tb.recs, tb.b.NewRecordBatch())
	}
	if len(tb.recs) == 0 && !tb.dirty && !positionLags(tb, cp) {
		return nil
	}
	props := map[string]string{}
	for k, v := range tb.props {
		props[k] = v
	}
	props[PropCursor] = formatCursor(tb.pending)
	props[PropSlot] = w.slot
	if cp != nil {
		props[PropPosition] = strconv.FormatUint(cp.Pos, 10)
		props[PropWatermark] = cp.Watermark.UTC().Format(time.RFC3339Nano)
	}
	pc := &pendingCommit{tb: tb, recs: tb.recs, props: props, cursor: tb.pending, rows: tb.rows, dead: tb.dead}
	if w.obs != nil {
		tb.detachTxs(pc)
		tb.dead = nil
	}
	w.buffered -= tb.bytes
	tb.recs, tb.rows, tb.bytes, tb.dirty = nil, 0, 0, false
	// The next commit's props start from these (the writer is discarded if
	// this commit fails), in a map of their own: the commit may still run
	// when the stream writes the next chunk's progress (WriteBatch), which
	// must not reach a commit that does not hold that chunk's rows (a
	// restart would resume the snapshot after rows never committed).
	tb.props = maps.Clone(props)
	return pc
}

// positionLags reports whether tb committed rows of a transaction that its
// recorded tidemark.position does not cover (a flush came due inside the
// transaction) and cp now does. Such a table is committed again, without
// rows, to record the position: silver merges a bronze range only once no
// row in it is above the position, and a table that receives nothing more
// would otherwise hold its last transaction back from silver for good.
func positionLags(tb *tableBuf, cp *pipeline.Checkpoint) bool {
	if cp == nil || tb.pending.LSN == 0 || tb.pending.LSN > cp.Pos {
		return false
	}
	p, err := strconv.ParseUint(tb.props[PropPosition], 10, 64)
	return err != nil || p < tb.pending.LSN
}

// commit appends pc's rows with its props. Safe on any goroutine: it
// touches only pc and the lake table.
func (w *Writer) commit(ctx context.Context, pc *pendingCommit) error {
	start := time.Now()
	err := pc.tb.tbl.Append(ctx, pc.recs, pc.props)
	for _, r := range pc.recs {
		r.Release()
	}
	pc.recs = nil
	if err != nil {
		return fault.MarkTransient(fmt.Errorf("bronze: commit %d rows to %s: %w", pc.rows, pc.tb.name(), err))
	}
	if w.obs != nil {
		if s, ok := pc.tb.tbl.CurrentSnapshot(); ok {
			pc.fileBytes = s.AddedBytes
		}
	}
	w.log.Debug("bronze commit", "table", pc.tb.name(), "rows", pc.rows, "cursor", pc.props[PropCursor], "took", time.Since(start))
	return nil
}

// applied applies a successful commit to the writer's state. Stream
// goroutine only.
func (w *Writer) applied(pcs []*pendingCommit) {
	for _, pc := range pcs {
		w.committed += int64(pc.rows)
		pc.tb.cursor = pc.cursor
	}
	if w.buffered < 0 {
		w.buffered = 0
	}
	w.report(pcs)
}

// commitTable commits tb's buffered rows (and its dirty props) with cp's
// position, now, on the calling goroutine; nothing may be in flight.
func (w *Writer) commitTable(ctx context.Context, tb *tableBuf, cp *pipeline.Checkpoint) error {
	pc := w.detach(tb, cp)
	if pc == nil {
		return nil
	}
	if err := w.commit(ctx, pc); err != nil {
		return err
	}
	w.applied([]*pendingCommit{pc})
	return nil
}

// flushJob is a flush running in the background (StartFlush).
type flushJob struct {
	cp     pipeline.Checkpoint
	pcs    []*pendingCommit
	done   chan struct{}
	err    error
	cancel context.CancelFunc
	// applied: its outcome is in the writer's state (waitFlush).
	applied bool
}

// Flush implements pipeline.Sink: it commits everything buffered, then
// the checkpoint, on the calling goroutine (after any flush StartFlush left
// in flight).
func (w *Writer) Flush(ctx context.Context, cp pipeline.Checkpoint) error {
	if _, err := w.FinishFlush(); err != nil {
		return err
	}
	job := &flushJob{cp: cp, pcs: w.detachAll(&cp)}
	if err := w.runFlush(ctx, job); err != nil {
		return err
	}
	w.applied(job.pcs)
	return nil
}

// detachAll detaches every table's buffered rows for a flush at cp.
func (w *Writer) detachAll(cp *pipeline.Checkpoint) []*pendingCommit {
	var pcs []*pendingCommit
	for _, id := range w.order {
		if pc := w.detach(w.tables[id], cp); pc != nil {
			pcs = append(pcs, pc)
		}
	}
	for _, tb := range []*tableBuf{w.dead, w.msgs} {
		if pc := w.detach(tb, cp); pc != nil {
			pcs = append(pcs, pc)
		}
	}
	return pcs
}

// StartFlush detaches everything buffered and commits it in the background,
// one commit per table, then records cp, exactly as Flush does; the caller
// goes on buffering changes meanwhile, into fresh buffers. FinishFlush waits
// for it; FlushDone says when. Only one flush runs at a time: StartFlush
// first waits for the previous one, and returns its error. The commit is
// not cancelled with ctx (a clean stop waits for it); Close cancels it.
// Stream goroutine only, like every method but the background commit.
func (w *Writer) StartFlush(ctx context.Context, cp pipeline.Checkpoint) error {
	// A later checkpoint covers an earlier one not collected.
	if _, err := w.FinishFlush(); err != nil {
		return err
	}
	pcs := w.detachAll(&cp)
	// Not cancelled with ctx (a clean stop waits for it), but bounded by its
	// deadline, if any (the final flush has one).
	var fctx context.Context
	var cancel context.CancelFunc
	if d, ok := ctx.Deadline(); ok {
		fctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), d)
	} else {
		fctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
	}
	job := &flushJob{cp: cp, pcs: pcs, done: make(chan struct{}), cancel: cancel}
	w.flushing = job
	go func() {
		defer close(job.done)
		defer cancel()
		defer fault.Recover("capture stream's bronze flush", &job.err)
		job.err = w.runFlush(fctx, job)
	}()
	return nil
}

// runFlush commits a flush's tables in order, then its checkpoint.
func (w *Writer) runFlush(ctx context.Context, job *flushJob) error {
	start := time.Now()
	if err := checkInfo(job.cp.Info); err != nil {
		for _, pc := range job.pcs {
			for _, r := range pc.recs {
				r.Release()
			}
			pc.recs = nil
		}
		return fmt.Errorf("bronze: record checkpoint of source %s: %w", w.source, err)
	}
	rows := 0
	for i, pc := range job.pcs {
		rows += pc.rows
		if err := w.commit(ctx, pc); err != nil {
			for _, rest := range job.pcs[i+1:] {
				for _, r := range rest.recs {
					r.Release()
				}
				rest.recs = nil
			}
			return err
		}
	}
	// Every bronze table holding the changes is committed; the checkpoint
	// that lets the source be acknowledged is not written yet.
	failpoint.Inject("bronze-before-checkpoint")
	props := checkpointProps(job.cp, w.now())
	// Setting the properties is idempotent: retry a few times before the
	// session fails (SQLite answers SQLITE_BUSY at once, without its busy
	// timeout, when a silver commit raced this one).
	var err error
	for attempt := 1; ; attempt++ {
		if err = w.cat.SetNamespaceProperties(ctx, SourceNamespace(w.source), props); err == nil || attempt == checkpointAttempts {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fault.MarkTransient(fmt.Errorf("bronze: record checkpoint of source %s: %w", w.source, err))
	}
	failpoint.Inject("bronze-after-checkpoint")
	w.log.Debug("bronze flush", "tables", len(job.pcs), "rows", rows, "position", job.cp.Pos, "took", time.Since(start))
	return nil
}

// FlushDone returns a channel closed when the flush StartFlush began has
// finished (nil when none is in flight): then FinishFlush does not block.
func (w *Writer) FlushDone() <-chan struct{} {
	if w.flushing == nil {
		return nil
	}
	return w.flushing.done
}

// FinishFlush waits for the flush StartFlush began, and returns its
// checkpoint: when err is nil, everything written before that StartFlush is
// durable and the checkpoint may be acknowledged. With no flush in flight it
// returns the zero Checkpoint and nil. After an error the Writer must be
// discarded.
func (w *Writer) FinishFlush() (pipeline.Checkpoint, error) {
	j := w.flushing
	if j == nil {
		return pipeline.Checkpoint{}, nil
	}
	err := w.waitFlush()
	w.flushing = nil
	return j.cp, err
}

// waitFlush waits for the flush in flight, if any, and applies its outcome
// to the writer's state, leaving its checkpoint for FinishFlush.
func (w *Writer) waitFlush() error {
	j := w.flushing
	if j == nil {
		return nil
	}
	<-j.done
	if j.err == nil && !j.applied {
		w.applied(j.pcs)
		j.applied = true
	}
	return j.err
}

// LoadCheckpoint implements pipeline.Sink.
func (w *Writer) LoadCheckpoint(ctx context.Context) (pipeline.Checkpoint, bool, error) {
	if err := w.waitFlush(); err != nil {
		return pipeline.Checkpoint{}, false, err
	}
	return LoadCheckpoint(ctx, w.cat, w.source)
}

// LoadCheckpoint reads the source-wide checkpoint from the catalog
// (checkpoint.go).
func LoadCheckpoint(ctx context.Context, cat lake.Catalog, source string) (pipeline.Checkpoint, bool, error) {
	props, err := cat.NamespaceProperties(ctx, SourceNamespace(source))
	if err != nil {
		if errors.Is(err, lake.ErrNoSuchNamespace) {
			return pipeline.Checkpoint{}, false, nil
		}
		return pipeline.Checkpoint{}, false, fmt.Errorf("bronze: read checkpoint of source %s: %w", source, err)
	}
	return parseCheckpoint(source, props)
}

// Close stops a flush still in flight (its outcome is what the lake
// says: the next session reads it back) and releases buffers.
func (w *Writer) Close() {
	if j := w.flushing; j != nil {
		j.cancel()
		<-j.done
		w.flushing = nil
	}
	for _, tb := range w.tables {
		tb.b.Release()
	}
	w.dead.b.Release()
	w.msgs.b.Release()
}
