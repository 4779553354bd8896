package silver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	raw := bronze.RecordedKey(b.Summary(), b.Properties())
	if raw == "" || raw == "null" {
		return nil, fault.With(fault.ErrNoPrimaryKey, fmt.Sprintf(
			"bronze table %s records no key (table property %s): silver needs the source table's primary key "+
				"or replica identity to merge by; recreate the bronze table with a current tidemark", name, bronze.PropKey), nil)
	}
	if bronze.Keyless(b.Summary(), b.Properties()) {
		return nil, fault.With(fault.ErrNoPrimaryKey, fmt.Sprintf(
			"bronze table %s records that its source table has no key (%s = []): it is captured into bronze only, with no silver table", name, bronze.PropKey), nil)
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
// the source columns (key columns required) but those in omit (columns
// dropped at the source, with silver.drop_column: drop), then the position
// columns and, with soft deletes, cdc_deleted. The format assigns the
// field ids.
func schemaFor(b *arrow.Schema, key []string, soft bool, omit []string) *arrow.Schema {
	isKey := map[string]bool{}
	for _, k := range key {
		isKey[k] = true
	}
	var fields []arrow.Field
	for _, f := range sourceFields(b) {
		if slices.Contains(omit, f.Name) && !isKey[f.Name] {
			continue
		}
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
// type is widened. A column the source dropped (bronze.PropDroppedColumns)
// is deleted from silver when drop is set (silver.drop_column: drop), and
// kept otherwise; in both modes it is never added (back) to silver, since
// bronze no longer fills it. A column dropped and added again at the source
// is deleted and added again in both modes: it is a new column. Anything
// else is fault.ErrIncompatibleSchema naming the table and column.
func evolve(ctx context.Context, s lake.KeyedTable, b lake.Table, key []string, drop bool, log *slog.Logger) error {
	bname := strings.Join(b.Ident(), ".")
	defs, err := bronze.Defaults(b.Properties())
	if err != nil {
		return fmt.Errorf("bronze table %s: %w", bname, err)
	}
	ids, err := bronze.ColumnIDs(b.Properties())
	if err != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("bronze table %s", bname), err)
	}
	dropped, err := droppedOf(b)
	if err != nil {
		return err
	}
	var del []string
	if drop {
		del = dropped
	}
	if err := deleteDropped(ctx, s, del, ids, key, log); err != nil {
		return err
	}
	if err := renameLike(ctx, s, b.ArrowSchema(), ids); err != nil {
		return err
	}
	return evolveSchema(ctx, s, b.ArrowSchema(), key, defs, dropped)
}

// droppedOf is bronze table b's dropped columns (bronze.PropDroppedColumns).
func droppedOf(b lake.Table) ([]string, error) {
	dropped, err := bronze.DroppedColumns(b.Properties())
	if err != nil {
		return nil, fault.With(fault.ErrCorruptState, fmt.Sprintf("bronze table %s", strings.Join(b.Ident(), ".")), err)
	}
	return dropped, nil
}

// deleteDropped deletes from silver table s the source columns the source
// no longer has: those of dropped (what its bronze table lists as dropped,
// with silver.drop_column: drop; nil otherwise), and those dropped and
// added again under the same name since the last merge, which bronze
// records under a new source column id (bIDs; bronze made it a new column
// too): silver records the old id for the name, and bronze records that id
// for no column now. The second kind is added back by evolveSchema, as a
// new column (null in every older row, or its default, as at the source).
// Key columns are never deleted (a key the source changed stops the merge
// in checkKey).
// One commit, which also drops the deleted names from silver's column ids
// and from its pending fills.
func deleteDropped(ctx context.Context, s lake.KeyedTable, dropped []string, bIDs map[string]int, key []string, log *slog.Logger) error {
	name := strings.Join(s.Ident(), ".")
	ids, err := bronze.ColumnIDs(s.Properties())
	if err != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("silver table %s", name), err)
	}
	alive := map[int]bool{}
	for _, id := range bIDs {
		alive[id] = true
	}
	var del []string
	for _, f := range sourceFields(s.ArrowSchema()) {
		if slices.Contains(key, f.Name) {
			continue
		}
		had, now := ids[f.Name], bIDs[f.Name]
		if slices.Contains(dropped, f.Name) || (had != 0 && now != 0 && had != now && !alive[had]) {
			del = append(del, f.Name)
		}
	}
	if len(del) == 0 {
		return nil
	}
	props := map[string]string{}
	if ids != nil {
		for _, n := range del {
			delete(ids, n)
		}
		props[bronze.PropColumnIDs] = bronze.EncodeColumnIDs(ids)
	}
	if pending := fillPending(s); len(pending) > 0 {
		kept := slices.DeleteFunc(slices.Clone(pending), func(c string) bool { return slices.Contains(del, c) })
		if len(kept) != len(pending) {
			js, _ := json.Marshal(kept)
			props[PropFillPending] = string(js)
		}
	}
	if err := s.Evolve(ctx, lake.Evolution{Delete: del, DeleteProps: props}); err != nil {
		return fmt.Errorf("silver table %s: delete columns dropped at the source %v: %w", name, del, err)
	}
	for _, c := range del {
		if slices.Contains(dropped, c) {
			log.Info("silver column deleted: dropped at the source (silver.drop_column: drop)", "table", name, "column", c)
		} else {
			log.Info("silver column deleted: dropped and added again at the source, added back as a new column", "table", name, "column", c)
		}
	}
	return nil
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
func evolveSchema(ctx context.Context, s lake.KeyedTable, b *arrow.Schema, key []string, defs map[string]bronze.Default, dropped []string) error {
	name := strings.Join(s.Ident(), ".")
	cur := s.ArrowSchema()
	if err := checkKey(s, key); err != nil {
		return err
	}
	var add []arrow.Field
	for _, f := range sourceFields(b) {
		haves, ok := cur.FieldsByName(f.Name)
		if !ok {
			if !slices.Contains(dropped, f.Name) {
				add = append(add, newColumn(f.Name, f.Type, true, docOf(f)))
			}
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
