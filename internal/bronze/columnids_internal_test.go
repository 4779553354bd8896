package bronze

import (
	"slices"
	"testing"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/lake"
)

// droppedAfter: which bronze columns the source no longer has, once the
// table is given a schema.
func TestDroppedAfter(t *testing.T) {
	schema := func(fields ...change.Field) *change.Schema { return &change.Schema{Fields: fields} }
	f := func(name string, id int) change.Field { return change.Field{Name: name, ID: id} }
	ids := map[string]int{"id": 1, "a": 2, "gone": 3}
	for _, c := range []struct {
		name    string
		dropped []string
		ids     map[string]int
		s       *change.Schema
		renames []lake.Rename
		want    []string
	}{
		{"nothing dropped", nil, ids, schema(f("id", 1), f("a", 2), f("gone", 3)), nil, nil},
		{"dropped", nil, ids, schema(f("id", 1), f("a", 2)), nil, []string{"gone"}},
		{"still dropped", []string{"gone"}, ids, schema(f("id", 1), f("a", 2)), nil, []string{"gone"}},
		{"renamed, not dropped", nil, ids, schema(f("id", 1), f("b", 2), f("gone", 3)), []lake.Rename{{From: "a", To: "b"}}, nil},
		{"added again (new attnum)", []string{"gone"}, ids, schema(f("id", 1), f("a", 2), f("gone", 4)), nil, nil},
		// A restart replays changes from before the DROP: the catalog has no
		// such column now, so it has no id.
		{"older layout replayed", []string{"gone"}, ids, schema(f("id", 1), f("a", 2), f("gone", 0)), nil, []string{"gone"}},
		// Without source ids (MySQL), a name back is a column added again.
		{"added again, no ids", []string{"gone"}, nil, schema(f("id", 0), f("a", 0), f("gone", 0)), nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := droppedAfter([]string{"id", "a", "gone"}, c.dropped, c.ids, c.s, c.renames)
			if !slices.Equal(got, c.want) {
				t.Errorf("droppedAfter = %q, want %q", got, c.want)
			}
		})
	}
	if got := encodeDropped(nil); got != "[]" {
		t.Errorf("encodeDropped(nil) = %s", got)
	}
	if got, err := DroppedColumns(map[string]string{PropDroppedColumns: `["gone"]`}); err != nil || !slices.Equal(got, []string{"gone"}) {
		t.Errorf("DroppedColumns = %q, %v", got, err)
	}
	if _, err := DroppedColumns(map[string]string{PropDroppedColumns: `{`}); err == nil {
		t.Error("DroppedColumns of an unreadable property: no error")
	}
}

// readdedColumns: a name the source now gives another attnum is a column
// dropped and added again, unless names were swapped or it is the key.
func TestReaddedColumns(t *testing.T) {
	f := func(name string, id int) change.Field { return change.Field{Name: name, ID: id} }
	have := []string{"id", "a", "b"}
	ids := map[string]int{"id": 1, "a": 2, "b": 3}
	for _, c := range []struct {
		name      string
		s         *change.Schema
		renamedTo map[string]string
		want      []string
	}{
		{"same columns", &change.Schema{Key: []string{"id"}, Fields: []change.Field{f("id", 1), f("a", 2), f("b", 3)}}, nil, nil},
		{"b added again", &change.Schema{Key: []string{"id"}, Fields: []change.Field{f("id", 1), f("a", 2), f("b", 4)}}, nil, []string{"b"}},
		{"a and b swapped", &change.Schema{Key: []string{"id"}, Fields: []change.Field{f("id", 1), f("a", 3), f("b", 2)}}, nil, nil},
		{"id unknown (older layout replayed)", &change.Schema{Key: []string{"id"}, Fields: []change.Field{f("id", 1), f("a", 2), f("b", 0)}}, nil, nil},
		{"the key", &change.Schema{Key: []string{"id"}, Fields: []change.Field{f("id", 9), f("a", 2), f("b", 3)}}, nil, nil},
		{"renamed onto", &change.Schema{Key: []string{"id"}, Fields: []change.Field{f("id", 1), f("b", 4)}}, map[string]string{"b": "a"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := readdedColumns(have, ids, c.s, c.renamedTo); !slices.Equal(got, c.want) {
				t.Errorf("readdedColumns = %q, want %q", got, c.want)
			}
		})
	}
	if got := readdedColumns(have, nil, &change.Schema{Fields: []change.Field{f("b", 4)}}, nil); got != nil {
		t.Errorf("without recorded ids: %q, want none", got)
	}
}
