package mysql

import (
	"testing"

	"github.com/tidemark/tidemark/internal/change"
)

func fieldIDs(s *change.Schema) map[string]int {
	out := map[string]int{}
	for _, f := range s.Fields {
		out[f.Name] = f.ID
	}
	return out
}

func schemaOf(names ...string) *change.Schema {
	s := &change.Schema{}
	for _, n := range names {
		s.Fields = append(s.Fields, change.Field{Name: n})
	}
	return s
}

// TestColumnIDs: the source's column numbering keeps a renamed column's
// id (so the lake renames it, data kept), numbers new names past every id
// the lake records, gives a name dropped and added again its old id (MySQL
// columns are matched by name), and ignores case as MySQL does.
func TestColumnIDs(t *testing.T) {
	var ids colIDs
	// The lake records ids, among them one of a column dropped since (7).
	if err := ids.learn(`{"id":1,"payload":2,"Amount":3,"gone":7}`); err != nil {
		t.Fatal(err)
	}
	s := schemaOf("id", "payload", "amount", "color")
	if !ids.stamp(s) {
		t.Error("stamp: a column the lake has no id for (color) is not reported as numbered")
	}
	if got, want := fieldIDs(s), map[string]int{"id": 1, "payload": 2, "amount": 3, "color": 8}; !equalIDs(got, want) {
		t.Errorf("ids %v, want %v", got, want)
	}
	if ids.stamp(schemaOf("id", "payload")) {
		t.Error("stamp: nothing new, but reported numbered")
	}

	// RENAME COLUMN payload TO body; CHANGE COLUMN Color colour ...
	ids.rename("payload", "body")
	ids.rename("Color", "colour")
	s = schemaOf("id", "body", "amount", "colour", "payload")
	ids.stamp(s)
	if got, want := fieldIDs(s), map[string]int{"id": 1, "body": 2, "amount": 3, "colour": 8, "payload": 9}; !equalIDs(got, want) {
		t.Errorf("after the renames (and payload added again): ids %v, want %v", got, want)
	}
	// The lake still records the old names (no row event since): learning
	// them again keeps what the stream read.
	if err := ids.learn(`{"id":1,"payload":2,"amount":3,"old":2}`); err != nil {
		t.Fatal(err)
	}
	s = schemaOf("body", "gone", "old")
	ids.stamp(s)
	if got, want := fieldIDs(s), map[string]int{"body": 2, "gone": 7, "old": 10}; !equalIDs(got, want) {
		t.Errorf("ids %v, want %v", got, want)
	}
	if err := ids.learn(`{"id":`); err == nil {
		t.Error("learn: an unreadable value is no error")
	}
}

func equalIDs(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
