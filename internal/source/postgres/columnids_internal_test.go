package postgres

import (
	"testing"

	"github.com/tidemark/tidemark/internal/change"
)

// assignIDs: renamed columns keep their attnum even when the catalog has
// moved on since the Relation message; added columns take theirs.
func TestAssignIDs(t *testing.T) {
	schema := func(cols ...any) *change.Schema {
		s := &change.Schema{}
		for i := 0; i < len(cols); i += 2 {
			s.Fields = append(s.Fields, change.Field{Name: cols[i].(string), ID: cols[i+1].(int)})
		}
		return s
	}
	for _, tc := range []struct {
		name       string
		prev, next *change.Schema // next: ids of the fields matched by name set, others 0
		live       map[string]int
		want       []int
	}{
		{"rename of the last column, catalog current",
			schema("id", 1, "a", 2), schema("id", 1, "b", 0), map[string]int{"id": 1, "b": 2}, []int{1, 2}},
		{"rename, catalog renamed it again since",
			schema("id", 1, "a", 2), schema("id", 1, "b", 0), map[string]int{"id": 1, "c": 2}, []int{1, 2}},
		{"back to an older name (start after a rename, changes before it in the slot)",
			schema("id", 1, "b", 2), schema("id", 1, "a", 0), map[string]int{"id": 1, "b": 2}, []int{1, 2}},
		{"drop and add",
			schema("id", 1, "a", 2), schema("id", 1, "b", 0), map[string]int{"id": 1, "b": 3}, []int{1, 3}},
		{"rename in the middle and an add",
			schema("id", 1, "a", 2, "z", 3), schema("id", 1, "b", 0, "z", 3, "n", 0), map[string]int{"id": 1, "b": 2, "z": 3, "n": 4}, []int{1, 2, 3, 4}},
		{"added then dropped since",
			schema("id", 1), schema("id", 1, "n", 0), map[string]int{"id": 1}, []int{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assignIDs(tc.next, tc.prev, tc.live)
			for i, f := range tc.next.Fields {
				if f.ID != tc.want[i] {
					t.Errorf("column %s: id %d, want %d", f.Name, f.ID, tc.want[i])
				}
			}
		})
	}
}
