package bronze

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// PropColumnIDs is a table property (bronze and silver): the source's own
// identity of each column (change.Field.ID: PostgreSQL's attnum), as a JSON
// object from column name to id. A column the source renamed keeps its id,
// so a schema whose column is not in the table by name but whose id is
// recorded for a column the schema no longer has is a rename: the lake
// column is renamed (Iceberg renames by field id, the data stays). Columns
// without a known id (lakes written before it) are matched by name. MySQL
// has no column ids: its source numbers the columns itself, from the ids
// recorded here, and moves an id to the new name at a RENAME COLUMN or
// CHANGE COLUMN it reads in the binlog.
const PropColumnIDs = pipeline.PropColumnIDs

// ColumnIDs parses PropColumnIDs of a table's properties (nil if absent).
func ColumnIDs(props map[string]string) (map[string]int, error) {
	raw := props[PropColumnIDs]
	if raw == "" {
		return nil, nil
	}
	var ids map[string]int
	if err := json.Unmarshal([]byte(raw), &ids); err != nil {
		return nil, fmt.Errorf("table property %s is unreadable: %w", PropColumnIDs, err)
	}
	return ids, nil
}

// EncodeColumnIDs is the PropColumnIDs value of ids.
func EncodeColumnIDs(ids map[string]int) string {
	b, _ := json.Marshal(ids)
	return string(b)
}

// schemaIDs are the known ids of s's fields.
func schemaIDs(s *change.Schema) map[string]int {
	ids := map[string]int{}
	for _, f := range s.Fields {
		if f.ID != 0 {
			ids[f.Name] = f.ID
		}
	}
	return ids
}

// Renames returns the renames that bring a table whose columns are have
// (names, with the ids recorded in ids) to the names want (with their ids
// wantIDs): a wanted name the table lacks whose id is recorded for a column
// of the table that want no longer has. Also the ids after the renames
// (ids, renamed, plus every id of wantIDs).
func Renames(have []string, ids map[string]int, want []string, wantIDs map[string]int) ([]lake.Rename, map[string]int) {
	byID := map[int]string{}
	for _, n := range have {
		if id := ids[n]; id != 0 {
			byID[id] = n
		}
	}
	var out []lake.Rename
	next := map[string]int{}
	for n, id := range ids {
		next[n] = id
	}
	for _, n := range want {
		id := wantIDs[n]
		if slices.Contains(have, n) || id == 0 {
			continue
		}
		old, ok := byID[id]
		if !ok || slices.Contains(want, old) {
			continue
		}
		out = append(out, lake.Rename{From: old, To: n})
		delete(byID, id)
		delete(next, old)
	}
	for n, id := range wantIDs {
		next[n] = id
	}
	// Forget names that were renamed away and not reused.
	for _, r := range out {
		if _, ok := wantIDs[r.From]; !ok {
			delete(next, r.From)
		}
	}
	return out, next
}

// PropDroppedColumns is a bronze table property: the columns of the table
// that the source no longer has (dropped at the source), as a JSON list of
// names, as of the latest schema the table was given. Bronze keeps such a
// column (it is the change log: older rows hold its values), and rows
// written after the drop hold NULL in it; silver reads this list to drop
// the column too (silver.drop_column: drop) or never to add it back. A
// name leaves the list when the source has a column of that name again
// (ADD COLUMN after the DROP): bronze fills the same column again.
const PropDroppedColumns = "tidemark.dropped-columns"

// DroppedColumns parses PropDroppedColumns of a table's properties (nil if
// absent).
func DroppedColumns(props map[string]string) ([]string, error) {
	raw := props[PropDroppedColumns]
	if raw == "" {
		return nil, nil
	}
	var names []string
	if err := json.Unmarshal([]byte(raw), &names); err != nil {
		return nil, fmt.Errorf("table property %s is unreadable: %w", PropDroppedColumns, err)
	}
	return names, nil
}

// encodeDropped is the PropDroppedColumns value of names ("[]" for none).
func encodeDropped(names []string) string {
	if len(names) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(names)
	return string(b)
}

// droppedAfter returns the dropped columns of a table whose source columns
// are have (in order), which were dropped (a PropDroppedColumns list), once
// it is given schema s with renames applied: a column of have that s lacks
// by name and that is not renamed away. A dropped name that s has again
// stays dropped when the table records source column ids (ids) and s gives
// the column none: the source's catalog does not have that name now
// (postgres columnIDs), so s is an older layout the stream replays (after
// a restart, changes from before the DROP), not a column added again.
func droppedAfter(have, dropped []string, ids map[string]int, s *change.Schema, renames []lake.Rename) []string {
	inS := map[string]int{}
	for _, f := range s.Fields {
		inS[f.Name] = f.ID
	}
	renamed := map[string]bool{}
	for _, r := range renames {
		renamed[r.From] = true
	}
	var out []string
	for _, n := range have {
		id, ok := inS[n]
		switch {
		case !ok && !renamed[n]:
			out = append(out, n)
		case ok && id == 0 && len(ids) > 0 && slices.Contains(dropped, n):
			out = append(out, n)
		}
	}
	return out
}

// readdedColumns returns the columns of s that the source dropped and added
// again under the same name (ALTER TABLE … DROP COLUMN c, … ADD COLUMN c):
// a column of the table (have) whose recorded source id (ids) is not the
// id s gives it, both known, and not renamed onto (renamedTo), while the
// old id is no column of s (else names were swapped, which is not told
// apart). Attnums are never reused, so it is a new column. Key columns are
// left out: a changed key is refused (checkKey).
func readdedColumns(have []string, ids map[string]int, s *change.Schema, renamedTo map[string]string) []string {
	inS := map[int]bool{}
	for _, f := range s.Fields {
		if f.ID != 0 {
			inS[f.ID] = true
		}
	}
	var out []string
	for _, f := range s.Fields {
		old := ids[f.Name]
		if f.ID == 0 || old == 0 || old == f.ID || inS[old] || slices.Contains(s.Key, f.Name) {
			continue
		}
		if _, ok := renamedTo[f.Name]; ok || !slices.Contains(have, f.Name) {
			continue
		}
		out = append(out, f.Name)
	}
	return out
}
