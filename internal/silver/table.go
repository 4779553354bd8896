package silver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
)

// Column names of a silver table besides the source columns.
const (
	ColLSN     = bronze.ColLSN // position of the row's last change
	ColSeq     = bronze.ColSeq
	ColTS      = bronze.ColTS // commit time of the row's last change
	ColDeleted = "cdc_deleted"
)

// Snapshot summary keys of every silver commit.
const (
	// PropBronzeSnapshot is silver's cursor: the id of the bronze snapshot
	// merged through.
	PropBronzeSnapshot = "tidemark.bronze-snapshot"
	// PropPosition and PropWatermark are copied from that bronze snapshot:
	// silver holds every change of the source up to this position.
	PropPosition  = bronze.PropPosition
	PropWatermark = bronze.PropWatermark
)

// DeadLetterTable is the table, in namespace silver.<source>, of the
// changes a merge could not apply.
const DeadLetterTable = "_dead_letter"

// buildingLevel is the namespace level under silver.<source> where a
// table is built until its initial snapshot is complete (see doc.go).
const buildingLevel = "_building"

// Namespace returns the catalog namespace of a source schema's silver tables.
func Namespace(source, schema string) []string { return []string{"silver", source, schema} }

// Ident returns the identifier of a source table's silver table.
func Ident(source, schema, table string) []string {
	return append(Namespace(source, schema), table)
}

// DeadLetterIdent returns the identifier of silver.<source>._dead_letter.
func DeadLetterIdent(source string) []string { return []string{"silver", source, DeadLetterTable} }

// buildingIdent is where a silver table is built before it is published.
func buildingIdent(source, schema, table string) []string {
	return []string{"silver", source, buildingLevel, schema, table}
}

// BuildingIdent is the identifier of a silver table while it is built.
func BuildingIdent(source, schema, table string) []string {
	return buildingIdent(source, schema, table)
}

// KeyOf returns the key columns a bronze table records in its tidemark.key
// property (a JSON list, written when bronze creates the table), or, after
// a key change, in its current snapshot's summary (bronze/rekey.go: the
// marker of the change carries the new key, and every later commit).
func KeyOf(b lake.Table) ([]string, error) {
	name := strings.Join(b.Ident(), ".")
	raw, ok := b.Summary()[bronze.PropKey]
	if !ok || raw == "" {
		raw, ok = b.Properties()[bronze.PropKey]
	}
	if !ok || raw == "" || raw == "null" {
		return nil, fault.With(fault.ErrNoPrimaryKey, fmt.Sprintf(
			"bronze table %s records no key (table property %s): silver needs the source table's primary key "+
				"or replica identity to merge by; recreate the bronze table with a current tidemark", name, bronze.PropKey), nil)
	}
	var key []string
	if err := json.Unmarshal([]byte(raw), &key); err != nil || len(key) == 0 {
		return nil, fault.With(fault.ErrCorruptState, fmt.Sprintf(
			"bronze table %s: table property %s = %q is not a JSON list of column names", name, bronze.PropKey, raw), err)
	}
	sch := b.ArrowSchema()
	for _, k := range key {
		if _, ok := sch.FieldsByName(k); !ok {
			return nil, fault.With(fault.ErrCorruptState, fmt.Sprintf(
				"bronze table %s: key column %q (property %s) is not a column of the table", name, k, bronze.PropKey), nil)
		}
	}
	return key, nil
}

// sourceFields returns the source columns of a bronze schema (every
// column but bronze's cdc_* ones), in order.
func sourceFields(s *arrow.Schema) []arrow.Field {
	var out []arrow.Field
	for _, f := range s.Fields() {
		if !strings.HasPrefix(f.Name, "cdc_") {
			out = append(out, f)
		}
	}
	return out
}

// docKey is the Arrow field metadata key of a column's comment
// (lake.TableSpec).
const docKey = "doc"

// newColumn returns a column for a new schema: no metadata but its comment.
func newColumn(name string, t arrow.DataType, nullable bool, doc string) arrow.Field {
	f := arrow.Field{Name: name, Type: t, Nullable: nullable}
	if doc != "" {
		f.Metadata = arrow.NewMetadata([]string{docKey}, []string{doc})
	}
	return f
}

// docOf returns a field's comment.
func docOf(f arrow.Field) string {
	doc, _ := f.Metadata.GetValue(docKey)
	return doc
}

// schemaFor derives a new silver table's schema from its bronze table's:
// the source columns (key columns required), then the position columns and,
// with soft deletes, cdc_deleted. The format assigns the field ids.
func schemaFor(b *arrow.Schema, key []string, soft bool) *arrow.Schema {
	isKey := map[string]bool{}
	for _, k := range key {
		isKey[k] = true
	}
	var fields []arrow.Field
	for _, f := range sourceFields(b) {
		fields = append(fields, newColumn(f.Name, f.Type, !isKey[f.Name], docOf(f)))
	}
	fields = append(fields,
		newColumn(ColLSN, arrow.PrimitiveTypes.Int64, false, "source position (commit LSN) of the row's last change"),
		newColumn(ColSeq, arrow.PrimitiveTypes.Int64, false, "order of the row's last change inside its transaction"),
		newColumn(ColTS, arrow.FixedWidthTypes.Timestamp_us, true, "source commit time of the row's last change"),
	)
	if soft {
		fields = append(fields, newColumn(ColDeleted, arrow.FixedWidthTypes.Boolean, false,
			"true: the row was deleted at the source (soft delete); its last contents are kept"))
	}
	return arrow.NewSchema(fields, nil)
}

// evolve brings the silver table's columns up to its bronze table's: a
// column added in bronze is added (optional, null in older rows), a widened
// type is widened. A column bronze no longer fills stays. Anything else is
// fault.ErrIncompatibleSchema naming the table and column.
func evolve(ctx context.Context, s lake.KeyedTable, b lake.Table, key []string) error {
	defs, err := bronze.Defaults(b.Properties())
	if err != nil {
		return fmt.Errorf("bronze table %s: %w", strings.Join(b.Ident(), "."), err)
	}
	ids, err := bronze.ColumnIDs(b.Properties())
	if err != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("bronze table %s", strings.Join(b.Ident(), ".")), err)
	}
	if err := renameLike(ctx, s, b.ArrowSchema(), ids); err != nil {
		return err
	}
	return evolveSchema(ctx, s, b.ArrowSchema(), key, defs)
}

// renameLike renames the columns of silver table s that its bronze table
// (columns b, column ids bIDs: bronze.PropColumnIDs) renamed: silver
// records the ids of its columns in the same property, and a bronze column
// silver lacks by name whose id silver records for a column bronze no
// longer has is that column renamed. A silver table that records no ids
// takes bronze's for the names both have. The columns still to be given
// their default (PropFillPending) follow their renames.
func renameLike(ctx context.Context, s lake.KeyedTable, b *arrow.Schema, bIDs map[string]int) error {
	name := strings.Join(s.Ident(), ".")
	if len(bIDs) == 0 {
		return nil
	}
	ids, err := bronze.ColumnIDs(s.Properties())
	if err != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("silver table %s", name), err)
	}
	var have, want []string
	for _, f := range sourceFields(s.ArrowSchema()) {
		have = append(have, f.Name)
	}
	if ids == nil {
		ids = map[string]int{}
		for _, n := range have {
			if id, ok := bIDs[n]; ok {
				ids[n] = id
			}
		}
	}
	wantIDs := map[string]int{}
	for _, f := range sourceFields(b) {
		want = append(want, f.Name)
		if id, ok := bIDs[f.Name]; ok {
			wantIDs[f.Name] = id
		}
	}
	renames, next := bronze.Renames(have, ids, want, wantIDs)
	enc := bronze.EncodeColumnIDs(next)
	if len(renames) == 0 {
		if s.Properties()[bronze.PropColumnIDs] == enc {
			return nil
		}
		return s.SetProperties(ctx, map[string]string{bronze.PropColumnIDs: enc})
	}
	props := map[string]string{bronze.PropColumnIDs: enc}
	if pending := fillPending(s); len(pending) > 0 {
		for i, c := range pending {
			for _, r := range renames {
				if c == r.From {
					pending[i] = r.To
				}
			}
		}
		js, _ := json.Marshal(pending)
		props[PropFillPending] = string(js)
	}
	if err := s.Evolve(ctx, lake.Evolution{Rename: renames, RenameProps: props}); err != nil {
		return fmt.Errorf("silver table %s: rename columns: %w", name, err)
	}
	return nil
}

// evolveSchema is evolve with bronze's schema and defaults. Columns added
// with a default (defs) to a table that has rows are listed in
// PropFillPending in the same commit (defaults.go).
func evolveSchema(ctx context.Context, s lake.KeyedTable, b *arrow.Schema, key []string, defs map[string]bronze.Default) error {
	name := strings.Join(s.Ident(), ".")
	cur := s.ArrowSchema()
	if err := checkKey(s, key); err != nil {
		return err
	}
	var add []arrow.Field
	for _, f := range sourceFields(b) {
		haves, ok := cur.FieldsByName(f.Name)
		if !ok {
			add = append(add, newColumn(f.Name, f.Type, true, docOf(f)))
			continue
		}
		have := haves[0]
		if lake.SameType(have.Type, f.Type) {
			continue
		}
		if err := s.Evolve(ctx, lake.Evolution{Widen: []arrow.Field{newColumn(f.Name, f.Type, have.Nullable, "")}}); err != nil {
			if errors.Is(err, lake.ErrIncompatibleType) {
				return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf(
					"silver table %s: column %q is %s in silver and %s in bronze, which the table format cannot evolve; "+
						"rebuild the silver table (drop it: the next merge rebuilds it from bronze)", name, f.Name, have.Type, f.Type), err)
			}
			return fmt.Errorf("silver table %s: widen column %q to %s: %w", name, f.Name, f.Type, err)
		}
	}
	if len(add) > 0 {
		note := func(snap int64) map[string]string {
			if snap == lake.NoSnapshot {
				return nil
			}
			pending := fillPending(s)
			for _, f := range add {
				if _, ok := defs[f.Name]; ok && !slices.Contains(pending, f.Name) {
					pending = append(pending, f.Name)
				}
			}
			if len(pending) == 0 {
				return nil
			}
			js, _ := json.Marshal(pending)
			return map[string]string{PropFillPending: string(js)}
		}
		if err := s.Evolve(ctx, lake.Evolution{Add: add, Note: note}); err != nil {
			if errors.Is(err, lake.ErrIncompatibleType) {
				return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("silver table %s: add columns", name), err)
			}
			return fmt.Errorf("silver table %s: add columns: %w", name, err)
		}
	}
	return nil
}

// checkKey verifies that the silver table is keyed by key (recorded in its
// tidemark.key property when it was created, as bronze records its own).
func checkKey(s lake.KeyedTable, key []string) error {
	var have []string
	if p := s.Properties()[bronze.PropKey]; p == "" || json.Unmarshal([]byte(p), &have) != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf(
			"silver table %s records no readable key (table property %s); rebuild it (drop it: the next merge rebuilds it from bronze)",
			strings.Join(s.Ident(), "."), bronze.PropKey), nil)
	}
	if strings.Join(have, "\x00") != strings.Join(key, "\x00") {
		return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf(
			"silver table %s is keyed by (%s) but its bronze table now records the key (%s): a changed primary key "+
				"cannot be merged into the old table; rebuild the silver table (drop it: the next merge rebuilds it from bronze)",
			strings.Join(s.Ident(), "."), strings.Join(have, ", "), strings.Join(key, ", ")), nil)
	}
	return nil
}
