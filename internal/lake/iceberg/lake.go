package iceberg

import (
	"context"
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/tidemark/tidemark/internal/lake"
)

// This file is the format-neutral contract (package lake) on top of the
// Iceberg-specific methods: *Catalog is a lake.Catalog, *Table a
// lake.KeyedTable. Callers that need Iceberg itself (bronze's typed
// schema evolution, maintenance) keep using the concrete types.

var (
	_ lake.Catalog    = (*Catalog)(nil)
	_ lake.KeyedTable = (*Table)(nil)
	_ lake.Maintained = (*Table)(nil)
	_ lake.LiveRows   = (*LiveRows)(nil)
	_ lake.Bucketer   = (*Bucketer)(nil)
)

// liveOf returns the *LiveRows behind a lake.LiveRows this package made.
func liveOf(live lake.LiveRows) (*LiveRows, error) {
	switch l := live.(type) {
	case nil:
		return nil, nil
	case *LiveRows:
		return l, nil
	default:
		return nil, fmt.Errorf("live rows of type %T were not read from an Iceberg table", live)
	}
}

// Open loads the table ident (lake.Catalog): LoadTable.
func (c *Catalog) Open(ctx context.Context, ident []string) (lake.KeyedTable, error) {
	t, err := c.LoadTable(ctx, ident)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Create creates the table ident from a neutral spec (lake.Catalog): a
// keyed table (CreateKeyedTable) when spec.Key is set, else CreateTable.
// Field ids are assigned fresh; field metadata "doc" becomes the column's
// doc.
func (c *Catalog) Create(ctx context.Context, ident []string, spec lake.TableSpec) (lake.KeyedTable, error) {
	if spec.Schema == nil {
		return nil, fmt.Errorf("iceberg: create table %s: schema is nil", joinIdent(ident))
	}
	sch, err := table.ArrowSchemaToIcebergWithFreshIDs(spec.Schema, false)
	if err != nil {
		return nil, fmt.Errorf("iceberg: create table %s: %w", joinIdent(ident), err)
	}
	var t *Table
	if len(spec.Key) > 0 {
		if spec.DayPartition != "" {
			return nil, fmt.Errorf("iceberg: create table %s: a keyed table is partitioned by bucket, not by day", joinIdent(ident))
		}
		t, err = c.CreateKeyedTable(ctx, ident, KeyedTableSpec{Schema: sch, Key: spec.Key, Buckets: spec.Buckets,
			DeleteMode: spec.DeleteMode, Properties: spec.Properties, PlaceAs: spec.PlaceAs})
	} else {
		t, err = c.CreateTable(ctx, ident, TableSpec{Schema: sch, DayPartition: spec.DayPartition, Properties: spec.Properties, PlaceAs: spec.PlaceAs})
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Rename is RenameTable (lake.Catalog).
func (c *Catalog) Rename(ctx context.Context, from, to []string) (lake.KeyedTable, error) {
	t, err := c.RenameTable(ctx, from, to)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Drop removes the table ident from the catalog; its files stay (orphan
// removal deletes them). The error wraps ErrNoSuchTable if there is none.
func (c *Catalog) Drop(ctx context.Context, ident []string) error {
	if err := validateTableIdent(ident); err != nil {
		return fmt.Errorf("iceberg: drop table %q: %w", ident, err)
	}
	// SQLite's immediate SQLITE_BUSY: nothing was dropped (retryBusy).
	if err := retryBusy(ctx, func() error { return c.cat.DropTable(ctx, table.Identifier(slices.Clone(ident))) }); err != nil {
		return c.classify(fmt.Errorf("iceberg: drop table %s: %w", joinIdent(ident), err))
	}
	return nil
}

// Evolve deletes (DeleteColumns), renames (RenameColumns), widens, then
// adds columns given as Arrow fields (lake.Table): WidenColumn for each of
// e.Widen, then one AddColumnsNoting commit for e.Add with e.Note.
func (t *Table) Evolve(ctx context.Context, e lake.Evolution) error {
	if len(e.Delete) > 0 {
		if err := t.DeleteColumns(ctx, e.Delete, e.DeleteProps); err != nil {
			return err
		}
	}
	if len(e.Rename) > 0 {
		if err := t.RenameColumns(ctx, e.Rename, e.RenameProps); err != nil {
			return err
		}
	}
	for _, f := range e.Widen {
		typ, err := table.ArrowTypeToIceberg(f.Type, false)
		if err != nil {
			return fmt.Errorf("iceberg: table %s: widen column %s: %w: %w", t.name, f.Name, ErrIncompatibleType, err)
		}
		if err := t.WidenColumn(ctx, f.Name, typ); err != nil {
			return err
		}
	}
	if len(e.Add) == 0 {
		return nil
	}
	sch, err := table.ArrowSchemaToIcebergWithFreshIDs(arrow.NewSchema(e.Add, nil), false)
	if err != nil {
		return fmt.Errorf("iceberg: table %s: add columns: %w: %w", t.name, ErrIncompatibleType, err)
	}
	add := make([]iceberggo.NestedField, 0, len(e.Add))
	for _, f := range sch.Fields() {
		add = append(add, iceberggo.NestedField{Name: f.Name, Type: f.Type, Doc: f.Doc})
	}
	return t.AddColumnsNoting(ctx, add, e.Note)
}
