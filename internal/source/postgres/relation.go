package postgres

import (
	"fmt"
	"strings"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
)

// Column is one source column with its lake mapping.
type Column struct {
	Name    string
	TypeOID uint32
	TypeMod int32
	// AttNum is the column's pg_attribute.attnum (0 if not known): it
	// survives a RENAME COLUMN and is never reused.
	AttNum int16
	// TypeName is format_type() of the column (catalog-described relations only).
	TypeName string
	// NotNull and Orderable (a default btree ordering) are known for
	// catalog-described relations only: they decide whether the table can
	// be keyed on the whole row (chooseKey).
	NotNull   bool
	Orderable bool
	Map       typemap.Mapping
}

// Relation describes the columns of a source table as of some point in the
// stream (a pgoutput Relation message) or of a snapshot query.
type Relation struct {
	ID      uint32 // pgoutput relation id (0 for snapshot relations)
	Table   change.TableID
	Columns []Column
	// KeyNames are the table's key columns (primary key or replica identity index).
	KeyNames []string
	// KeyIdx are the positions of KeyNames in Columns (-1 if missing).
	KeyIdx []int
	// schema is the lake schema changes of this relation are written with.
	schema *change.Schema
	// unopened: the relation arrived in a transaction the table's
	// replacedBefore skips, so the lake has not been told of its schema
	// (which may be the old, incompatible one); the first change written
	// with it opens it (stream.openRelation).
	unopened *table
}

// Index returns the position of the named column, or -1.
func (r *Relation) Index(name string) int {
	for i := range r.Columns {
		if r.Columns[i].Name == name {
			return i
		}
	}
	return -1
}

func (r *Relation) setKeys(keys []string) {
	r.KeyNames = keys
	r.KeyIdx = make([]int, len(keys))
	for i, k := range keys {
		r.KeyIdx[i] = r.Index(k)
	}
}

// keyString encodes the raw text of the key columns of a row; it is equal for
// the same key whether the row came from the stream or from a snapshot.
// raw[i] == nil means NULL.
func (r *Relation) keyString(raw [][]byte) (string, bool) {
	var b strings.Builder
	for n, i := range r.KeyIdx {
		if i < 0 || i >= len(raw) || raw[i] == nil {
			return "", false
		}
		if n > 0 {
			b.WriteByte(0)
		}
		b.Write(raw[i])
	}
	return b.String(), true
}

// mapColumns fills each column's mapping, chosen by o.
func mapColumns(table change.TableID, cols []Column, lookup typemap.Lookup, o typemap.Options) error {
	for i := range cols {
		m, err := o.Map(typemap.Column{Name: cols[i].Name, TypeOID: cols[i].TypeOID, TypeMod: cols[i].TypeMod}, lookup)
		if err != nil {
			return fmt.Errorf("table %s column %q: %w", table, cols[i].Name, err)
		}
		cols[i].Map = m
	}
	return nil
}
