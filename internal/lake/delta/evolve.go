package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/lake"
)

// ErrColumnMapping: renaming or deleting a column of a Delta table needs
// column mapping (delta.columnMapping.mode = name: files address columns
// by physical names), which this package does not write yet. Without it
// the data files would keep answering to the old names. It wraps
// lake.ErrUnsupported.
var ErrColumnMapping = fmt.Errorf("%w: renaming or deleting a column of a Delta table needs column mapping, which tidemark does not write yet", lake.ErrUnsupported)

// Evolve widens the columns of widen (by name, to their Type) and appends
// the columns of add (nullable, before the partition column), in one
// metaData commit (ADD COLUMNS, or CHANGE COLUMN when it only widens),
// with the table properties note returns (given the version the commit
// reads; called again if the commit is retried; nil: none).
//
// A widening Delta allows (see widens) turns the typeWidening feature on
// (delta.enableTypeWidening, reader 3 / writer 7) and records the change
// in the column's delta.typeChanges metadata; files written before keep
// the narrower type and are read widened. Any other type change, and an
// added column that exists with another type, wrap lake.ErrIncompatibleType.
// Nothing to change commits nothing.
func (t *Table) Evolve(ctx context.Context, widen, add []arrow.Field, note func(read int64) map[string]string) error {
	return t.evolve(ctx, widen, add, nil, note)
}

func (t *Table) evolve(ctx context.Context, widen, add []arrow.Field, userProps map[string]string, note func(int64) map[string]string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := checkWritable(t.st.protocol, t.st.meta); err != nil {
		return fmt.Errorf("Delta table %s: %w", t.dir, err)
	}
	op := "ADD COLUMNS"
	if len(add) == 0 {
		op = "CHANGE COLUMN"
	}
	// note runs without t.mu (it may call the table's methods): a build
	// for a version it has not seen asks for it (needNote), and is run
	// again with its properties.
	var noted map[string]string
	notedAt := int64(-2)
	for attempt := 1; ; attempt++ {
		err := t.commitMetadata(ctx, op, userProps, t.evolveBuild(widen, add, note, noted, notedAt))
		var nn *needNote
		if !errors.As(err, &nn) || attempt == maxCommitAttempts {
			return err
		}
		t.mu.Unlock()
		noted, notedAt = note(nn.version), nn.version
		t.mu.Lock()
	}
}

// needNote: evolve's build needs note's properties for the version it
// reads.
type needNote struct{ version int64 }

func (n *needNote) Error() string {
	return fmt.Sprintf("the properties to note at version %d", n.version)
}

// evolveBuild returns evolve's metaData build; noted are note's properties
// for version notedAt.
func (t *Table) evolveBuild(widen, add []arrow.Field, note func(int64) map[string]string, noted map[string]string, notedAt int64) func(st *state) (*Metadata, *Protocol, error) {
	return func(st *state) (*Metadata, *Protocol, error) {
		var sch structType
		if err := json.Unmarshal([]byte(st.meta.SchemaString), &sch); err != nil {
			return nil, nil, fmt.Errorf("Delta table %s: schema: %w", t.dir, err)
		}
		find := func(name string) int {
			return slices.IndexFunc(sch.Fields, func(f structField) bool { return strings.EqualFold(f.Name, name) })
		}
		conf := maps.Clone(map[string]string(st.meta.Configuration))
		if conf == nil {
			conf = map[string]string{}
		}
		changed := false
		for _, w := range widen {
			i := find(w.Name)
			if i < 0 {
				return nil, nil, fmt.Errorf("Delta table %s: widen column %s: the table has no such column", t.dir, w.Name)
			}
			f := &sch.Fields[i]
			if slices.Contains(st.meta.PartitionColumns, f.Name) {
				return nil, nil, fmt.Errorf("Delta table %s: widen column %s: %w: it is the partition column", t.dir, w.Name, lake.ErrIncompatibleType)
			}
			var ignored schemaFeatures
			cur, err := fromDeltaType(f.Type, &ignored)
			if err != nil {
				return nil, nil, fmt.Errorf("Delta table %s: column %s: %w", t.dir, f.Name, err)
			}
			if arrow.TypeEqual(cur, w.Type) {
				continue // widened already (a retry)
			}
			if !widens(cur, w.Type) {
				return nil, nil, fmt.Errorf("Delta table %s: column %s: %w: Delta cannot widen %s to %s (type widening allows wider integers, float to double, date to timestamp_ntz, a decimal with more digits)", t.dir, f.Name, lake.ErrIncompatibleType, cur, w.Type)
			}
			nt, err := toDeltaType(w.Type, &ignored, f.Name)
			if err != nil {
				return nil, nil, fmt.Errorf("Delta table %s: %w: %w", t.dir, lake.ErrIncompatibleType, err)
			}
			var from, to string
			_ = json.Unmarshal(f.Type, &from)
			_ = json.Unmarshal(nt, &to)
			md := maps.Clone(f.Metadata)
			if md == nil {
				md = map[string]any{}
			}
			changes, _ := md["delta.typeChanges"].([]any)
			md["delta.typeChanges"] = append(changes, map[string]any{"fromType": from, "toType": to})
			f.Type, f.Metadata = nt, md
			conf[PropTypeWidening] = "true"
			changed = true
		}
		nparts := 0
		for _, f := range sch.Fields {
			if slices.Contains(st.meta.PartitionColumns, f.Name) {
				nparts++
			}
		}
		var added []structField
		for _, c := range add {
			if i := find(c.Name); i >= 0 {
				var ignored schemaFeatures
				cur, err := fromDeltaType(sch.Fields[i].Type, &ignored)
				if err != nil {
					return nil, nil, fmt.Errorf("Delta table %s: column %s: %w", t.dir, c.Name, err)
				}
				if !lake.SameType(cur, c.Type) {
					return nil, nil, fmt.Errorf("Delta table %s: add column %s %s: %w: the table has it as %s", t.dir, c.Name, c.Type, lake.ErrIncompatibleType, cur)
				}
				continue // added already (a retry)
			}
			c.Nullable = true
			var feat schemaFeatures
			sf, err := toDeltaStruct([]arrow.Field{c}, &feat, "")
			if err != nil {
				return nil, nil, fmt.Errorf("Delta table %s: %w: %w", t.dir, lake.ErrIncompatibleType, err)
			}
			added = append(added, sf.Fields...)
		}
		if len(added) > 0 {
			// Before the partition column, which stays last.
			at := len(sch.Fields) - nparts
			sch.Fields = slices.Insert(sch.Fields, at, added...)
			changed = true
		}
		if !changed {
			return nil, nil, nil
		}
		if note != nil {
			if notedAt != st.version {
				return nil, nil, &needNote{version: st.version}
			}
			maps.Copy(conf, noted)
		}
		s, err := json.Marshal(sch)
		if err != nil {
			return nil, nil, err
		}
		feat, err := featuresOf(string(s))
		if err != nil {
			return nil, nil, fmt.Errorf("Delta table %s: %w", t.dir, err)
		}
		m := *st.meta
		m.SchemaString, m.Configuration = string(s), conf
		return &m, upgrade(st.protocol, protocolFor(feat, conf)), nil
	}
}
