package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/tidemark/tidemark/internal/change"
)

// columnIDs gives the fields of s, the schema of a Relation message, their
// attnum (change.Field.ID), which the message does not carry, so that a
// RENAME COLUMN renames the lake column instead of adding one. prev is the
// table's schema before the message (its fields' ids known: from the
// catalog at start, or from this function).
//
// A column whose name prev has keeps its id. The others are matched with
// the catalog as it is now, which may be ahead of the message (DDL made
// later, while tidemark was stopped), using two facts: attnums are never
// reused, and a Relation message lists the live columns in attnum order,
// with added columns after every older one. So a column of prev absent by
// name from the message but alive in the catalog now was alive then: it is
// in the message under another name. Those columns, in attnum order, are
// the first unmatched columns of the message, in order (renamed columns
// keep their place; added ones come after). The remaining unmatched
// columns are added columns: their id is the catalog's attnum for the name
// if the catalog has it (and it is no id of prev), else 0 (not known:
// matched by name). Not told apart: a column dropped and one of the same
// name added while tidemark was stopped (taken as the same column), and
// names swapped by renames while stopped.
func (c *Capture) columnIDs(ctx context.Context, t change.TableID, s, prev *change.Schema) error {
	named := map[string]int{}
	for _, f := range prev.Fields {
		named[f.Name] = f.ID
	}
	unmatched := false
	for i := range s.Fields {
		if id, ok := named[s.Fields[i].Name]; ok {
			s.Fields[i].ID = id
		} else {
			unmatched = true
		}
	}
	if !unmatched {
		return nil
	}
	conn, err := c.d.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT attname, attnum FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, quoteTable(t))
	if err != nil {
		return classify(fmt.Errorf("table %s: read column numbers: %w", t, err))
	}
	live := map[string]int{}
	for rows.Next() {
		var name string
		var num int16
		if err := rows.Scan(&name, &num); err != nil {
			rows.Close()
			return classify(fmt.Errorf("table %s: read column numbers: %w", t, err))
		}
		live[name] = int(num)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return classify(fmt.Errorf("table %s: read column numbers: %w", t, err))
	}
	assignIDs(s, prev, live)
	return nil
}

// assignIDs is columnIDs given the catalog's live columns now (name ->
// attnum); fields of s matched by name already carry their id.
func assignIDs(s, prev *change.Schema, live map[string]int) {
	alive := map[int]bool{}
	for _, n := range live {
		alive[n] = true
	}
	kept, used := map[int]bool{}, map[int]bool{}
	for _, f := range s.Fields {
		if f.ID != 0 {
			kept[f.ID] = true
		}
	}
	var renamed []int // prev ids absent from s by name, alive now
	for _, f := range prev.Fields {
		used[f.ID] = true
		if f.ID != 0 && !kept[f.ID] && alive[f.ID] {
			renamed = append(renamed, f.ID)
		}
	}
	slices.Sort(renamed)
	named := map[string]bool{}
	for _, f := range prev.Fields {
		named[f.Name] = true
	}
	k := 0
	for i := range s.Fields {
		f := &s.Fields[i]
		if named[f.Name] {
			continue
		}
		if k < len(renamed) {
			f.ID = renamed[k]
			k++
			continue
		}
		if n, ok := live[f.Name]; ok && !used[n] {
			f.ID = n
		}
	}
}
