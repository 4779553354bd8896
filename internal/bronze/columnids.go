package bronze

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/lake"
)

// PropColumnIDs is a table property (bronze and silver): the source's own
// identity of each column (change.Field.ID: PostgreSQL's attnum), as a JSON
// object from column name to id. A column the source renamed keeps its id,
// so a schema whose column is not in the table by name but whose id is
// recorded for a column the schema no longer has is a rename: the lake
// column is renamed (Iceberg renames by field id, the data stays). Columns
// without a known id (lakes written before it, MySQL) are matched by name.
const PropColumnIDs = "tidemark.column-ids"

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
