package lake

import (
	"context"
	"errors"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/fault"
)

// Errors every format returns, wrapped, so that callers test them with
// errors.Is whatever the format.
var (
	// ErrNoSuchTable: the identifier names no table.
	ErrNoSuchTable = errors.New("table does not exist")
	// ErrTableExists: a create or rename found the identifier taken.
	// Nothing was changed.
	ErrTableExists = errors.New("table already exists")
	// ErrNoSuchNamespace: the namespace does not exist.
	ErrNoSuchNamespace = errors.New("namespace does not exist")
	// ErrInvalidIdentifier: an identifier is empty, has an empty level or a
	// level with a '.' (see the package documentation on naming).
	ErrInvalidIdentifier = errors.New("invalid identifier")
	// ErrIncompatibleType: a column cannot be evolved to the type asked
	// for (the format does not allow that widening).
	ErrIncompatibleType = errors.New("incompatible type")
	// ErrUnsupported: the format cannot do what was asked (a schema change
	// it cannot express, …). Nothing was changed; the error says what the
	// format lacks.
	ErrUnsupported = errors.New("not supported by the table format")
	// ErrSnapshotNotFound: a snapshot id is not in the table's history (it
	// never was, or it was expired).
	ErrSnapshotNotFound = errors.New("snapshot not found in the table's history")
	// ErrCommitConflict: another writer committed to the table between the
	// moment a merge read it and its commit. The merge's inputs are stale:
	// the caller reloads and recomputes. Nothing was applied. It is
	// fault.ErrCommitConflict, so the error keeps its name
	// ([commit_conflict]) and its class (transient) up to the exit code.
	ErrCommitConflict error = fault.ErrCommitConflict
)

// NoSnapshot stands for "before the first snapshot" where a snapshot id is
// expected. Formats map their own commit ids onto non-negative int64s
// (Iceberg: the snapshot id; Delta: the table version).
const NoSnapshot int64 = -1

// Delete modes of a keyed table.
const (
	// MergeOnRead deletes rows without rewriting the files that hold them
	// (Iceberg: position delete files; Delta: deletion vectors); readers
	// apply the deletes until compaction folds them in.
	MergeOnRead = "merge-on-read"
	// CopyOnWrite rewrites every data file that holds a deleted row.
	CopyOnWrite = "copy-on-write"
)

// Snapshot describes one commit of a table.
type Snapshot struct {
	ID       int64
	ParentID int64 // NoSnapshot for the first
	// Operation is append, overwrite, delete or replace.
	Operation string
	// Props are the commit's properties, including the keys the writer
	// passed to Append or Merge (tidemark.position, …).
	Props map[string]string
	// AddedRecords is the number of rows the commit added (0 if unknown).
	AddedRecords int64
	// AddedBytes is the size of the data files the commit added (0 if
	// unknown).
	AddedBytes  int64
	TimestampMs int64
	// SequenceNumber grows along a table's history.
	SequenceNumber int64
}

// TableSpec describes a table to create.
type TableSpec struct {
	// Schema is the table's columns: the Arrow types a record batch of
	// the table holds (see Table.ArrowSchema). A non-nullable field is a
	// required column; the field metadata "doc" is the column's comment.
	// Field ids in the metadata are ignored: the format assigns its own.
	Schema *arrow.Schema
	// Key names the key columns of a keyed table, in key order (required
	// columns); nil for an append-only table. The format lays the table
	// out for upserts by key (Iceberg: identifier fields, sort order).
	Key []string
	// Buckets > 0 hash-partitions a keyed table by Key[0] into that many
	// buckets, where the format can (see KeyedTable.Bucketer).
	Buckets int
	// DayPartition, if set, partitions the table by the day of that
	// column (a date or timestamp column).
	DayPartition string
	// DeleteMode of a keyed table: MergeOnRead (empty) or CopyOnWrite.
	// CopyOnWrite on a table without Key makes it one whose rows a Merge
	// with a filter deletes (gold, replaced whole by each refresh) rather
	// than an append-only one.
	DeleteMode string
	// Properties are further table properties.
	Properties map[string]string
	// PlaceAs, if set, is the identifier whose place in the warehouse the
	// table's files take instead of the table's own: a table created
	// under a staging name and renamed into place later (silver's build)
	// keeps its files where a table of its final name would have them.
	// Nothing else may be created under PlaceAs meanwhile.
	PlaceAs []string
}

// Evolution is a schema change (Table.Evolve).
type Evolution struct {
	// Delete are columns removed from the schema, applied before anything
	// else, in one commit with DeleteProps. Data files keep their values,
	// but no read sees them again: a column added later under the same
	// name is a new column (formats that track columns by id give it a new
	// id), null in every older row. A name the table lacks is taken as
	// deleted already (a retry).
	Delete      []string
	DeleteProps map[string]string
	// Rename are columns renamed (From -> To), applied first, in one
	// commit with RenameProps; the column keeps its data (formats that
	// track columns by id rename in place). A rename whose From is gone and
	// whose To exists is taken as done.
	Rename      []Rename
	RenameProps map[string]string
	// Widen names existing columns (by Name) and the type each is widened
	// to (Type): int to long, float to double, a decimal's precision, …
	// The error wraps ErrIncompatibleType where the format cannot widen.
	Widen []arrow.Field
	// Add are columns appended to the schema, in order. They are optional
	// (older rows read as null) whatever the field's Nullable; the
	// metadata "doc" is the column's comment.
	Add []arrow.Field
	// Note, if not nil, returns properties committed atomically with the
	// added columns, given the table's current snapshot id (NoSnapshot for
	// a table without one); nil properties: none. It may be called again
	// if the commit is retried.
	Note func(snapshot int64) map[string]string
}

// Rename is one column rename of an Evolution.
type Rename struct{ From, To string }

// Table is what bronze, silver, maintain and verify need of any table: an
// append-only change log, or the read side of a keyed table.
//
// A table caches its state as of its last load, commit or Refresh: reads
// (ArrowSchema, Summary, History, scans) see that state until then. Methods
// are safe for concurrent use; commits are serialized with each other.
// Every method blocks until done; ctx bounds it. Errors from the storage
// or the catalog are classified (internal/fault) by the format.
type Table interface {
	// Ident returns the table's identifier (namespace levels, then name).
	Ident() []string
	// ArrowSchema returns the table's current columns as an Arrow schema:
	// one field per column, in order; string, binary and list are the
	// regular (not large) Arrow types; timestamps are µs, with time zone
	// "UTC" for timestamps with a time zone. Build records for Append
	// from it.
	ArrowSchema() *arrow.Schema
	// Properties returns the table's properties. The map is the caller's.
	Properties() map[string]string
	// SetProperties sets table properties in one commit (no snapshot).
	SetProperties(ctx context.Context, props map[string]string) error
	// Summary returns the current snapshot's Props plus its "operation",
	// or nil when the table has no snapshot: the table's cursor.
	Summary() map[string]string
	// CurrentSnapshot returns the table's current snapshot, or false if
	// it has none.
	CurrentSnapshot() (Snapshot, bool)
	// Snapshot returns one snapshot of the history; the error wraps
	// ErrSnapshotNotFound if the table does not hold it (any more).
	Snapshot(id int64) (Snapshot, error)
	// History returns the snapshots after `after` (exclusive; NoSnapshot:
	// from the first) up to and including to, oldest first, along to's
	// ancestry; empty when after == to. The error wraps
	// ErrSnapshotNotFound when to is unknown or after is not an ancestor
	// of to (expired, or the table was replaced).
	History(after, to int64) ([]Snapshot, error)
	// Refresh reloads the table's state from the catalog.
	Refresh(ctx context.Context) error

	// Append commits recs (built on ArrowSchema, any number of batches)
	// as one snapshot whose Props hold props: the rows and the props
	// become visible together or not at all, to every reader and after a
	// crash. A commit that loses a race to another appender is redone;
	// Append does not deduplicate: a writer that must not append twice
	// reads its cursor (Summary) back first. Appending no rows still
	// commits a snapshot holding props.
	Append(ctx context.Context, recs []arrow.RecordBatch, props map[string]string) error
	// Evolve deletes, renames, widens then adds columns (see Evolution). A no-op evolution
	// commits nothing. A format that cannot delete or rename columns
	// (Delta without column mapping) refuses them with an error wrapping
	// ErrUnsupported, before changing anything. Records built on the old ArrowSchema can no longer
	// be appended: rebuild them on the new one.
	Evolve(ctx context.Context, e Evolution) error

	// Scan calls fn with every live row of the current snapshot.
	// Batches are released when fn returns (Retain to keep one).
	Scan(ctx context.Context, fn func(arrow.RecordBatch) error) error
	// ScanWhere is Scan restricted to the rows f matches (nil: all).
	ScanWhere(ctx context.Context, f *Filter, fn func(arrow.RecordBatch) error) error
	// ScanAppended calls fn with the rows the append snapshots after
	// `after` (exclusive; NoSnapshot: from the first) up to and including
	// to added, read with the current schema (columns added since read as
	// null). Other snapshots (compaction, deletes) are skipped: this is
	// for append-only tables. Row order within a data file is kept; files
	// come in no particular order. Batches are released when fn returns.
	ScanAppended(ctx context.Context, after, to int64, fn func(arrow.RecordBatch) error) error
	// ScanAppendedWhere is ScanAppended restricted to the rows f matches.
	ScanAppendedWhere(ctx context.Context, after, to int64, f *Filter, fn func(arrow.RecordBatch) error) error
	// AppendedBounds returns, from file statistics alone (no data read),
	// the rows the appends of (after, to] added and the largest value of
	// the long column col among them; ok is false when some file lacks the
	// statistic.
	AppendedBounds(ctx context.Context, after, to int64, col string) (rows, maxVal int64, ok bool, err error)
	// AppendedRowBytes estimates the in-memory bytes a row of the appends
	// of (after, to] takes, from file statistics (0: unknown).
	AppendedRowBytes(ctx context.Context, after, to int64) (float64, error)
}

// SnapshotScanner is a Table that reads an earlier snapshot of itself
// (time travel). Both formats implement it; callers type-assert.
type SnapshotScanner interface {
	// ScanSnapshotWhere is ScanWhere as of snapshot id: the rows live in
	// it, on the table's current columns. The error wraps
	// ErrSnapshotNotFound when the snapshot, or a file it needs, is gone
	// (expired, vacuumed).
	ScanSnapshotWhere(ctx context.Context, id int64, f *Filter, fn func(arrow.RecordBatch) error) error
}

// KeyedTable is a Table that rows are upserted into and deleted from by
// key: silver. Its merge path costs what the rows it changes cost, not the
// size of the table: ScanLiveKeys reads only the columns a merge needs and
// says where each row is; MergeRows deletes exactly those rows and appends
// their new versions in one commit (Iceberg: position delete files; Delta:
// deletion vectors).
type KeyedTable interface {
	Table
	// MergeOnRead reports whether the table deletes rows without
	// rewriting their files, which MergeRows needs.
	MergeOnRead() bool
	// Bucketer returns how the table is hash-partitioned by a key column,
	// or false when it is not (or the format does not bucket).
	Bucketer() (Bucketer, bool)
	// ScanLiveKeys calls fn with the columns cols of the live rows of the
	// current snapshot, in the files f's statistics do not rule out (f is
	// not applied to the rows), reporting only rows whose first column of
	// cols (an int or long) holds one of keys (nil keys: every row). Each
	// batch holds rows of one file (an index into the returned LiveRows),
	// in file order; pos.At(i) is row i's position in that file. Batches
	// and pos are the caller's only until fn returns; fn is called by one
	// goroutine at a time.
	ScanLiveKeys(ctx context.Context, f *Filter, cols []string, keys []int64,
		fn func(rec arrow.RecordBatch, file int, pos Positions) error) (LiveRows, error)
	// ScanLiveWithout is ScanLiveKeys (all keys, no filter) over the files
	// written before the column without was added.
	ScanLiveWithout(ctx context.Context, without string, cols []string,
		fn func(rec arrow.RecordBatch, file int, pos Positions) error) (LiveRows, error)
	// ReadLiveRows reads the columns cols of rows (found by a scan that
	// returned live), calling fn with batches and the RowID of each row.
	ReadLiveRows(ctx context.Context, live LiveRows, rows []RowID, cols []string,
		fn func(rec arrow.RecordBatch, ids []RowID) error) error
	// MergeRows deletes rows (found by the scan that returned live) and
	// the rows del matches (nil: none), and appends recs, in one commit
	// whose Props hold props. If the table moved since live was read,
	// nothing is written and the error wraps ErrCommitConflict. The table
	// must be MergeOnRead when rows is not empty.
	MergeRows(ctx context.Context, live LiveRows, rows []RowID, del *Filter, recs []arrow.RecordBatch, props map[string]string) error
	// Merge is MergeRows without rows deleted by position: it deletes the
	// rows del matches and appends recs in one commit.
	Merge(ctx context.Context, del *Filter, recs []arrow.RecordBatch, props map[string]string) error
	// StageMerge begins a merge written in parts (MergeStage): a merge too
	// large to hold in memory at once is folded in passes, each writing its
	// files as it goes, and committed once. The table must be MergeOnRead.
	StageMerge(ctx context.Context) (MergeStage, error)
}

// MergeStage is one merge written in parts: each Add writes the files of
// a part (its rows' deletes, the rows it appends) at once and keeps only
// their descriptions, so the caller need hold one part in memory; Commit
// makes them all visible in one commit, or none of them. Readers never
// see a part alone; a crash before Commit leaves the table as it was (the
// files written are orphans, removed by maintenance). A stage is used by
// one goroutine.
type MergeStage interface {
	// Add deletes rows (found by the scan that returned live, which must
	// have read the state of the table the stage began at; nil live when
	// rows is empty) and appends recs. Rows deleted by several Adds are
	// deleted once; the caller routes each key to one Add (for one key the
	// highest source position wins: a key's delete and its new row belong
	// to the same part). The error wraps ErrCommitConflict when live read
	// another state.
	Add(ctx context.Context, live LiveRows, rows []RowID, recs []arrow.RecordBatch) error
	// Commit deletes the rows del matches (nil: none) and commits what
	// every Add wrote, in one commit whose Props hold props. If the table
	// moved since the stage began, nothing is committed and the error
	// wraps ErrCommitConflict. The stage is done either way.
	Commit(ctx context.Context, del *Filter, props map[string]string) error
	// Abort removes the files the stage wrote (best effort). After Commit
	// it does nothing.
	Abort()
}

// RowID locates a row a live scan reported: a file of its LiveRows and the
// row's position in that file.
type RowID struct {
	File int
	Pos  int64
}

// Positions are the positions in their file of the rows of a batch a live
// scan reports: row i is at First+i when Pos is nil, else at Pos[i].
type Positions struct {
	First int64
	Pos   []int64
}

// At returns the position of row i.
func (p Positions) At(i int) int64 {
	if p.Pos == nil {
		return p.First + int64(i)
	}
	return p.Pos[i]
}

// LiveRows is the state of a table a live scan read (its snapshot and
// files), which RowIDs index. Only the format that returned it accepts it
// back.
type LiveRows interface {
	// UpperBound returns the largest value of the long column col in
	// file, from file statistics; false when unknown.
	UpperBound(file int, col string) (int64, bool)
}

// Bucketer computes the bucket of a key value as the table's writer does,
// so that a caller that groups rows by it writes one file per group.
type Bucketer interface {
	// Column is the bucketed column; Buckets the number of buckets.
	Column() string
	Buckets() int
	// Of returns the bucket of row i of a (a column of Column's values);
	// ok is false for a null or an unsupported Arrow type.
	Of(a arrow.Array, i int) (bucket int, ok bool)
}

// Catalog opens and creates the tables of one warehouse. Methods block;
// errors wrap the sentinel errors above where they apply.
type Catalog interface {
	// Warehouse returns the warehouse's location, as configured.
	Warehouse() string
	// Close releases the catalog's resources. Tables opened from it must
	// not be used afterwards.
	Close() error

	// EnsureNamespace creates the namespace and its parents if missing
	// (idempotent).
	EnsureNamespace(ctx context.Context, ns []string) error
	// NamespaceProperties returns a namespace's properties; the error
	// wraps ErrNoSuchNamespace if it does not exist.
	NamespaceProperties(ctx context.Context, ns []string) (map[string]string, error)
	// SetNamespaceProperties sets (merges) properties of a namespace.
	SetNamespaceProperties(ctx context.Context, ns []string, props map[string]string) error
	// ListNamespaces returns every namespace.
	ListNamespaces(ctx context.Context) ([][]string, error)
	// ListTables returns the identifiers of the tables directly in ns.
	ListTables(ctx context.Context, ns []string) ([][]string, error)
	// TablesUnder returns the identifiers of the tables in the namespaces
	// directly below prefix (bronze.<source> → the tables of every
	// bronze.<source>.<schema>, not bronze.<source>._messages), sorted.
	TablesUnder(ctx context.Context, prefix []string) ([][]string, error)

	// Open loads the table ident; the error wraps ErrNoSuchTable if it
	// does not exist.
	Open(ctx context.Context, ident []string) (KeyedTable, error)
	// Create creates the table ident (and its namespace). If it exists the
	// error wraps ErrTableExists and nothing is changed.
	Create(ctx context.Context, ident []string, spec TableSpec) (KeyedTable, error)
	// Rename moves a table in one catalog transaction (creating to's
	// namespace): ErrTableExists if to exists, ErrNoSuchTable if from
	// does not.
	Rename(ctx context.Context, from, to []string) (KeyedTable, error)
	// Drop removes the table from the catalog (its files stay until
	// maintenance removes them); ErrNoSuchTable if it does not exist.
	Drop(ctx context.Context, ident []string) error
}

// SameType reports whether two column types are the same for schema
// evolution: equal Arrow types, with nested fields' names and nullability,
// ignoring field metadata (ids, comments).
func SameType(a, b arrow.DataType) bool { return arrow.TypeEqual(a, b) }
