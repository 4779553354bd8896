package silver

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// foldCase describes one key: rows are the input rows (refs are indices),
// each "v1|v2" holding the source columns; the changes and the prior row
// refer to them.
type foldCase struct {
	name    string
	rows    []string
	prior   *prior
	changes []change
	trunc   *pos
	soft    bool

	want        string // "put v1|v2 @lsn:seq", "put deleted ... ", "drop", "keep"
	wantHoles   []hole
	wantIgnored int
}

func at(lsn int64) pos { return pos{lsn: lsn} }

func ch(op byte, lsn int64, ref int, unchanged ...int) change {
	return change{pos: at(lsn), op: op, ref: ref, unchanged: unchanged}
}

func render(t *testing.T, c foldCase, o outcome) string {
	t.Helper()
	switch o.act {
	case keep:
		return "keep"
	case drop:
		return "drop"
	}
	ncols := len(strings.Split(c.rows[0], "|"))
	vals := make([]string, ncols)
	for col := range vals {
		ref := o.source(col)
		if ref < 0 || ref >= len(c.rows) {
			t.Fatalf("column %d from ref %d: out of range", col, ref)
		}
		vals[col] = strings.Split(c.rows[ref], "|")[col]
	}
	// positions come from the row meta points at
	var p pos
	found := false
	for _, x := range c.changes {
		if x.ref == o.meta {
			p, found = x.pos, true
		}
	}
	if !found && c.prior != nil && c.prior.ref == o.meta {
		p, found = c.prior.pos, true
	}
	if !found {
		t.Fatalf("meta ref %d is neither a change nor the prior row", o.meta)
	}
	del := ""
	if o.deleted {
		del = "deleted "
	}
	return fmt.Sprintf("put %s%s @%d", del, strings.Join(vals, "|"), p.lsn)
}

func TestFold(t *testing.T) {
	cases := []foldCase{
		{name: "insert", rows: []string{"1|a|big"},
			changes: []change{ch('c', 10, 0)}, want: "put 1|a|big @10"},
		{name: "update replaces the prior row", rows: []string{"1|old|big", "1|new|big2"},
			prior: &prior{pos: at(5), ref: 0}, changes: []change{ch('u', 10, 1)}, want: "put 1|new|big2 @10"},
		{name: "TOAST filled from earlier in the range", rows: []string{"1|a|BIG", "1|b|-"},
			changes: []change{ch('c', 10, 0), ch('u', 11, 1, 2)}, want: "put 1|b|BIG @11"},
		{name: "TOAST filled from the silver row", rows: []string{"1|a|BIG", "1|b|-"},
			prior: &prior{pos: at(5), ref: 0}, changes: []change{ch('u', 11, 1, 2)}, want: "put 1|b|BIG @11"},
		{name: "TOAST filled through two updates", rows: []string{"1|a|BIG", "1|b|-", "1|c|-"},
			prior: &prior{pos: at(5), ref: 0}, changes: []change{ch('u', 11, 1, 2), ch('u', 12, 2, 2)}, want: "put 1|c|BIG @12"},
		{name: "TOAST with no earlier state goes to the dead letters", rows: []string{"1|b|-"},
			changes: []change{ch('u', 11, 0, 2)}, want: "keep", wantHoles: []hole{{change: 0, cols: []int{2}}}},
		{name: "TOAST hole keeps the silver tombstone untouched", rows: []string{"1|a|BIG", "1|b|-"}, soft: true,
			prior: &prior{pos: at(5), ref: 0, deleted: true}, changes: []change{ch('u', 11, 1, 2)},
			want: "keep", wantHoles: []hole{{change: 0, cols: []int{2}}}},
		{name: "TOAST hole carried by a later update names the first change", rows: []string{"1|b|-", "1|c|-"},
			changes: []change{ch('u', 11, 0, 2), ch('u', 12, 1, 2)}, want: "keep", wantHoles: []hole{{change: 0, cols: []int{2}}}},
		{name: "TOAST hole superseded by a later snapshot row", rows: []string{"1|b|-", "1|b|BIG"},
			changes: []change{ch('u', 11, 0, 2), ch('r', 20, 1)}, want: "put 1|b|BIG @20"},
		{name: "TOAST hole superseded by a delete", rows: []string{"1|b|-", "1|-|-"},
			changes: []change{ch('u', 11, 0, 2), ch('d', 12, 1)}, want: "drop"},
		{name: "delete", rows: []string{"1|a|x", "1|-|-"},
			prior: &prior{pos: at(5), ref: 0}, changes: []change{ch('d', 10, 1)}, want: "drop"},
		{name: "delete then reinsert", rows: []string{"1|a|x", "1|-|-", "1|again|y"},
			prior: &prior{pos: at(5), ref: 0}, changes: []change{ch('d', 10, 1), ch('c', 11, 2)}, want: "put 1|again|y @11"},
		{name: "insert then delete", rows: []string{"1|a|x", "1|-|-"},
			changes: []change{ch('c', 10, 0), ch('d', 11, 1)}, want: "drop"},
		{name: "key change: the old key is deleted", rows: []string{"999|a|x", "999|-|-"},
			prior: &prior{pos: at(5), ref: 0}, changes: []change{ch('d', 10, 1)}, want: "drop"},
		{name: "key change: the new key is inserted", rows: []string{"3000|a|x"},
			changes: []change{ch('c', 10, 0)}, want: "put 3000|a|x @10"},
		{name: "truncate voids the silver row and earlier changes", rows: []string{"1|a|x", "1|b|y"},
			prior: &prior{pos: at(5), ref: 0}, changes: []change{ch('u', 8, 1)}, trunc: ptr(at(9)),
			want: "keep", wantIgnored: 1},
		{name: "truncate then insert", rows: []string{"1|a|x", "1|b|y", "1|c|z"},
			prior: &prior{pos: at(5), ref: 0}, changes: []change{ch('u', 8, 1), ch('c', 12, 2)}, trunc: ptr(at(9)),
			want: "put 1|c|z @12", wantIgnored: 1},
		{name: "truncate: no TOAST fill from voided rows", rows: []string{"1|a|BIG", "1|b|-"},
			prior: &prior{pos: at(5), ref: 0}, changes: []change{ch('u', 12, 1, 2)}, trunc: ptr(at(9)),
			want: "keep", wantHoles: []hole{{change: 0, cols: []int{2}}}},
		{name: "silver row newer than the truncate survives", rows: []string{"1|a|x"},
			prior: &prior{pos: at(15), ref: 0}, trunc: ptr(at(9)), want: "keep"},
		{name: "out-of-order arrival is applied by position", rows: []string{"1|late|x", "1|early|y"},
			changes: []change{ch('u', 20, 0), ch('c', 10, 1)}, want: "put 1|late|x @20"},
		{name: "snapshot row older than a stream change in the range", rows: []string{"1|stream|x", "1|snap|y"},
			changes: []change{ch('u', 20, 0), ch('r', 15, 1)}, want: "put 1|stream|x @20"},
		{name: "snapshot row older than the silver row is ignored", rows: []string{"1|stream|x", "1|snap|y"},
			prior: &prior{pos: at(20), ref: 0}, changes: []change{ch('r', 15, 1)}, want: "keep", wantIgnored: 1},
		{name: "replay of merged changes is a no-op", rows: []string{"1|b|y", "1|a|x", "1|b|y"},
			prior: &prior{pos: at(11), ref: 0}, changes: []change{ch('c', 10, 1), ch('u', 11, 2)}, want: "keep", wantIgnored: 2},
		{name: "same LSN orders by seq", rows: []string{"1|first|x", "1|second|y"},
			changes: []change{{pos: pos{10, 2}, op: 'u', ref: 1}, {pos: pos{10, 1}, op: 'c', ref: 0}}, want: "put 1|second|y @10"},
		{name: "soft delete keeps the last contents", rows: []string{"1|a|x", "1|-|-"}, soft: true,
			prior: &prior{pos: at(5), ref: 0}, changes: []change{ch('d', 10, 1)}, want: "put deleted 1|a|x @10"},
		{name: "soft delete of an unknown row keeps what the delete carried", rows: []string{"1|-|-"}, soft: true,
			changes: []change{ch('d', 10, 0)}, want: "put deleted 1|-|- @10"},
		{name: "soft delete after a TOAST update keeps the filled contents", rows: []string{"1|a|BIG", "1|b|-", "1|-|-"}, soft: true,
			prior: &prior{pos: at(5), ref: 0}, changes: []change{ch('u', 10, 1, 2), ch('d', 11, 2)}, want: "put deleted 1|b|BIG @11"},
		{name: "soft delete then reinsert", rows: []string{"1|a|x", "1|-|-", "1|c|z"}, soft: true,
			prior: &prior{pos: at(5), ref: 0}, changes: []change{ch('d', 10, 1), ch('c', 11, 2)}, want: "put 1|c|z @11"},
		{name: "reinsert over a soft-deleted silver row", rows: []string{"1|a|x", "1|c|z"}, soft: true,
			prior: &prior{pos: at(5), ref: 0, deleted: true}, changes: []change{ch('c', 11, 1)}, want: "put 1|c|z @11"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := fold(c.prior, append([]change(nil), c.changes...), c.trunc, c.soft)
			if got := render(t, c, o); got != c.want {
				t.Errorf("fold = %s, want %s", got, c.want)
			}
			if !reflect.DeepEqual(o.holes, c.wantHoles) {
				t.Errorf("holes = %v, want %v", o.holes, c.wantHoles)
			}
			if c.wantIgnored != 0 && o.ignored != c.wantIgnored {
				t.Errorf("ignored = %d, want %d", o.ignored, c.wantIgnored)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
