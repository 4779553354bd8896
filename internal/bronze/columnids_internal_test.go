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
