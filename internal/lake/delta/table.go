package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"

	"github.com/tidemark/tidemark/internal/lake"
)

// Errors, the lake package's sentinels so that errors.Is works whatever
// the format.
var (
	ErrNoSuchTable    = lake.ErrNoSuchTable
	ErrTableExists    = lake.ErrTableExists
	ErrCommitConflict = lake.ErrCommitConflict
	// ErrUnsupported: the table uses a protocol version or table feature
	// this package cannot honour (it would read or write it wrongly).
	ErrUnsupported = errors.New("unsupported Delta protocol feature")
)

// Table properties (metaData.configuration) this package sets or reads.
const (
	PropChangeDataFeed     = "delta.enableChangeDataFeed"
	PropAppendOnly         = "delta.appendOnly"
	PropCheckpointInterval = "delta.checkpointInterval"
	// PropNumIndexedCols is set to -1 (every column): the writer collects
	// statistics for every column, so readers may use them all.
	PropNumIndexedCols = "delta.dataSkippingNumIndexedCols"
	// PropDeletionVectors = true lets Delete write deletion vectors (set
	// at creation by Spec.DeletionVectors).
	PropDeletionVectors = "delta.enableDeletionVectors"
	// PropTypeWidening = true lets columns be widened (Table.Evolve): the
	// typeWidening feature (reader 3, writer 7).
	PropTypeWidening = "delta.enableTypeWidening"
	// PropDayPartition names the timestamp (or date) column whose UTC day
	// the table is partitioned by (Spec.DayPartition).
	PropDayPartition = "tidemark.day-partition"
)

// DefaultCheckpointInterval is the protocol's default: a checkpoint every
// 10 commits.
const DefaultCheckpointInterval = 10

// maxCommitAttempts bounds the optimistic-concurrency retries of a commit.
const maxCommitAttempts = 100

// allowedDeltaProps are the delta.* table properties a Spec may set: the
// ones whose semantics this writer honours.
var allowedDeltaProps = map[string]bool{
	PropChangeDataFeed:                   true,
	PropAppendOnly:                       true,
	PropCheckpointInterval:               true,
	PropNumIndexedCols:                   true,
	PropTypeWidening:                     true,
	"delta.logRetentionDuration":         true,
	"delta.deletedFileRetentionDuration": true,
}

// DayColumn is the name of the partition column that holds the UTC day of
// column col (Spec.DayPartition).
func DayColumn(col string) string { return col + "_day" }

// Spec describes a table to create.
type Spec struct {
	// Schema is the columns the records appended hold (see fromDeltaSchema
	// for the types); a non-nullable field is enforced on every append.
	Schema *arrow.Schema
	// DayPartition, if set, names a timestamp or date column: the table
	// gets a date column DayColumn(DayPartition), its partition column,
	// which the writer fills with the column's UTC day. Records appended
	// do not hold it; readers of the table see it as a column.
	DayPartition string
	// ChangeDataFeed sets delta.enableChangeDataFeed = true.
	ChangeDataFeed bool
	// AppendOnly sets delta.appendOnly = true (readers and other writers
	// then know no file is ever removed).
	AppendOnly bool
	// DeletionVectors sets delta.enableDeletionVectors = true (reader 3,
	// writer 7, feature deletionVectors): rows are deleted (Delete) by
	// deletion vectors, without rewriting files. Not with AppendOnly.
	DeletionVectors bool
	// CheckpointInterval sets delta.checkpointInterval (0: the default,
	// DefaultCheckpointInterval).
	CheckpointInterval int
	// Name is the table's name in its metaData.
	Name string
	// Properties are further table properties; delta.* keys are limited to
	// the ones this writer honours.
	Properties map[string]string
}

// Table is a Delta table in a directory of the local filesystem. It caches
// the snapshot of its last load, commit or Refresh. Methods are safe for
// concurrent use; commits of one Table are serialized, and commits of
// several writers (Tables, processes) to one directory are made safe by
// the log's put-if-absent commits.
type Table struct {
	dir string
	mem memory.Allocator

	mu     sync.Mutex
	st     *state
	schema *arrow.Schema // the columns appended records hold
	dayOf  string        // PropDayPartition, "" if none
}

// Create creates the table in dir (created if missing): commit 0 holds
// the protocol, the metaData and a commitInfo. If dir holds a table
// already, the error wraps ErrTableExists and nothing is changed.
func Create(ctx context.Context, dir string, spec Spec) (*Table, error) {
	if spec.Schema == nil || spec.Schema.NumFields() == 0 {
		return nil, fmt.Errorf("create Delta table %s: no columns", dir)
	}
	fields := slices.Clone(spec.Schema.Fields())
	var partCols []string
	if spec.DayPartition != "" {
		idx := spec.Schema.FieldIndices(spec.DayPartition)
		if len(idx) != 1 {
			return nil, fmt.Errorf("create Delta table %s: day partition column %q is not a column", dir, spec.DayPartition)
		}
		switch fields[idx[0]].Type.ID() {
		case arrow.TIMESTAMP, arrow.DATE32:
		default:
			return nil, fmt.Errorf("create Delta table %s: day partition column %q is %s, not a timestamp or date", dir, spec.DayPartition, fields[idx[0]].Type)
		}
		dc := DayColumn(spec.DayPartition)
		if len(spec.Schema.FieldIndices(dc)) > 0 {
			return nil, fmt.Errorf("create Delta table %s: column %q is taken by the day partition of %q", dir, dc, spec.DayPartition)
		}
		fields = append(fields, arrow.Field{Name: dc, Type: arrow.FixedWidthTypes.Date32, Nullable: true,
			Metadata: arrow.NewMetadata([]string{"doc"}, []string{"UTC day of " + spec.DayPartition + " (partition column, written by tidemark)"})})
		partCols = []string{dc}
	}
	schemaString, feat, err := toDeltaSchema(arrow.NewSchema(fields, nil))
	if err != nil {
		return nil, fmt.Errorf("create Delta table %s: %w", dir, err)
	}
	conf := map[string]string{PropNumIndexedCols: "-1"}
	for k, v := range spec.Properties {
		if strings.HasPrefix(k, "delta.") && !allowedDeltaProps[k] {
			return nil, fmt.Errorf("create Delta table %s: property %s: %w (not yet supported)", dir, k, ErrUnsupported)
		}
		conf[k] = v
	}
	if spec.ChangeDataFeed {
		conf[PropChangeDataFeed] = "true"
	}
	if spec.AppendOnly {
		conf[PropAppendOnly] = "true"
	}
	if spec.DeletionVectors {
		if spec.AppendOnly {
			return nil, fmt.Errorf("create Delta table %s: an append-only table cannot delete rows (DeletionVectors)", dir)
		}
		conf[PropDeletionVectors] = "true"
	}
	if spec.CheckpointInterval > 0 {
		conf[PropCheckpointInterval] = strconv.Itoa(spec.CheckpointInterval)
	}
	if spec.DayPartition != "" {
		conf[PropDayPartition] = spec.DayPartition
	}
	now := time.Now().UnixMilli()
	meta := &Metadata{
		ID:               uuid.NewString(),
		Format:           Format{Provider: "parquet", Options: nullMap{}},
		SchemaString:     schemaString,
		PartitionColumns: append([]string{}, partCols...),
		Configuration:    conf,
		CreatedTime:      &now,
	}
	if spec.Name != "" {
		meta.Name = &spec.Name
	}
	proto := protocolFor(feat, conf)
	pcols, _ := json.Marshal(meta.PartitionColumns)
	acts := []action{
		{CommitInfo: map[string]any{
			"timestamp": now,
			"operation": "CREATE TABLE",
			"operationParameters": map[string]any{
				"partitionBy": string(pcols),
				"properties":  mustJSON(conf),
			},
			"isBlindAppend": true,
			"engineInfo":    engineInfo,
			"txnId":         uuid.NewString(),
		}},
		{Protocol: &proto},
		{MetaData: meta},
	}
	data, err := encodeCommit(acts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, logDir), 0o755); err != nil {
		return nil, fmt.Errorf("create Delta table %s: %w", dir, err)
	}
	if l, err := listLog(dir); err == nil && len(l.commits) > 0 {
		return nil, fmt.Errorf("create Delta table %s: %w", dir, ErrTableExists)
	}
	if err := putIfAbsent(dir, 0, data); err != nil {
		if errors.Is(err, errVersionTaken) {
			return nil, fmt.Errorf("create Delta table %s: %w", dir, ErrTableExists)
		}
		return nil, fmt.Errorf("create Delta table %s: %w", dir, err)
	}
	// The new directories' entries, so that the table survives a crash.
	for _, d := range []string{dir, filepath.Dir(filepath.Clean(dir))} {
		if err := syncDir(d); err != nil {
			return nil, fmt.Errorf("create Delta table %s: %w", dir, err)
		}
	}
	return Open(ctx, dir)
}

const engineInfo = "tidemark"

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// protocolFor returns the protocol a new table needs: the legacy versions
// (reader 1, writer 2 for appendOnly, 4 for changeDataFeed) when they
// suffice, else reader 3 / writer 7 with the features listed
// (timestampNtz needs them).
func protocolFor(feat schemaFeatures, conf map[string]string) Protocol {
	cdf := conf[PropChangeDataFeed] == "true"
	ao := conf[PropAppendOnly] == "true"
	dv := conf[PropDeletionVectors] == "true"
	tw := conf[PropTypeWidening] == "true"
	if !feat.timestampNtz && !dv && !tw {
		w := 2 // delta-rs's and Spark's default for a new table
		if cdf {
			w = 4
		}
		return Protocol{MinReaderVersion: 1, MinWriterVersion: w}
	}
	var rf, wf []string
	if feat.timestampNtz {
		rf = append(rf, "timestampNtz")
	}
	if dv {
		rf = append(rf, "deletionVectors")
	}
	if tw {
		rf = append(rf, "typeWidening")
	}
	wf = append(wf, rf...)
	if ao {
		wf = append(wf, "appendOnly")
	}
	if cdf {
		wf = append(wf, "changeDataFeed")
	}
	return Protocol{MinReaderVersion: 3, MinWriterVersion: 7, ReaderFeatures: rf, WriterFeatures: wf}
}

// Open loads the table in dir; the error wraps ErrNoSuchTable when dir
// holds no Delta log, ErrUnsupported when the table needs a protocol
// feature this package does not read.
func Open(ctx context.Context, dir string) (*Table, error) {
	t := &Table{dir: dir, mem: memory.DefaultAllocator}
	if err := t.Refresh(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// Refresh reloads the table's latest snapshot from its log.
func (t *Table) Refresh(ctx context.Context) error {
	st, err := loadState(ctx, t.dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("Delta table %s: %w", t.dir, ErrNoSuchTable)
		}
		return fmt.Errorf("Delta table %s: %w", t.dir, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.setState(st)
}

// setState installs st (t.mu held), deriving the schema.
func (t *Table) setState(st *state) error {
	if err := checkReadable(st.protocol, st.meta); err != nil {
		return fmt.Errorf("Delta table %s: %w", t.dir, err)
	}
	full, _, err := fromDeltaSchema(st.meta.SchemaString)
	if err != nil {
		return fmt.Errorf("Delta table %s: %w", t.dir, err)
	}
	dayOf := st.meta.Configuration[PropDayPartition]
	parts := map[string]bool{}
	for _, p := range st.meta.PartitionColumns {
		parts[p] = true
	}
	if dayOf != "" && (len(parts) != 1 || !parts[DayColumn(dayOf)]) {
		return fmt.Errorf("Delta table %s: %w: %s = %q but the partition columns are %q", t.dir, ErrUnsupported, PropDayPartition, dayOf, st.meta.PartitionColumns)
	}
	var data []arrow.Field
	for _, f := range full.Fields() {
		if !parts[f.Name] {
			data = append(data, f)
		}
	}
	t.schema = arrow.NewSchema(data, nil)
	t.st, t.dayOf = st, dayOf
	return nil
}

// Dir returns the table's directory.
func (t *Table) Dir() string { return t.dir }

// ArrowSchema returns the columns appended records hold: the table's
// columns but the partition column (µs timestamps, "UTC" for timestamp).
func (t *Table) ArrowSchema() *arrow.Schema {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.schema
}

// Version returns the version of the cached snapshot.
func (t *Table) Version() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st.version
}

// Protocol returns the table's protocol action.
func (t *Table) Protocol() Protocol {
	t.mu.Lock()
	defer t.mu.Unlock()
	return *t.st.protocol
}

// Properties returns the table's configuration; the map is the caller's.
func (t *Table) Properties() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(map[string]string(t.st.meta.Configuration))
}

// PartitionColumns returns the table's partition columns.
func (t *Table) PartitionColumns() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.st.meta.PartitionColumns)
}

// TxnVersion returns the last version application appID committed (its
// txn action), false if it never did.
func (t *Table) TxnVersion(appID string) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	x, ok := t.st.txns[appID]
	return x.Version, ok
}

// Files returns the add actions of the table's active files, in the order
// they were added; the values are the caller's.
func (t *Table) Files() []Add {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Add, 0, len(t.st.order))
	for _, p := range t.st.order {
		out = append(out, *t.st.files[p])
	}
	return out
}

// CommitEntry is one commit of the table's history.
type CommitEntry struct {
	Version     int64
	TimestampMs int64
	Operation   string
	// Props are the properties the writer passed (Commit.Props), read
	// from commitInfo.userMetadata.
	Props map[string]string
	// Info is the whole commitInfo action.
	Info map[string]any
}

// Commit returns commit v of the history; the error wraps os.ErrNotExist
// if the log does not hold it (any more).
func (t *Table) Commit(v int64) (CommitEntry, error) {
	ci, err := commitInfo(t.dir, v)
	if err != nil {
		return CommitEntry{}, fmt.Errorf("Delta table %s: %w", t.dir, err)
	}
	e := CommitEntry{Version: v, Info: ci, Props: userProps(ci)}
	e.Operation, _ = ci["operation"].(string)
	if ts, ok := ci["timestamp"].(float64); ok {
		e.TimestampMs = int64(ts)
	}
	return e, nil
}

// History returns the commits after `after` (exclusive, -1: from the
// first) up to the cached version, oldest first.
func (t *Table) History(after int64) ([]CommitEntry, error) {
	var out []CommitEntry
	for v := after + 1; v <= t.Version(); v++ {
		e, err := t.Commit(v)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}
