package app

import (
	"cmp"
	"slices"
	"testing"
)

func TestSplitLakeName(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"bronze.shop.public.orders", []string{"bronze", "shop", "public", "orders"}},
		{"silver.shop.Mixed Case.select", []string{"silver", "shop", "Mixed Case", "select"}},
		{`silver.shop."Mixed Case"."select"`, []string{"silver", "shop", "Mixed Case", "select"}},
		{`silver.shop.sch"q.ta"ble`, []string{"silver", "shop", `sch"q`, `ta"ble`}},
		{`silver.shop."sch""q"."ta""ble"`, []string{"silver", "shop", `sch"q`, `ta"ble`}},
		{`silver.shop."a.b".t`, []string{"silver", "shop", "a.b", "t"}},
		{"orders", []string{"orders"}},
		{"a..b", nil},
		{"a.b.", nil},
		{`a."b`, nil},
		{`a."b"c`, nil},
		{`a.""`, nil},
	} {
		got, ok := splitLakeName(tc.in)
		if ok != (tc.want != nil) || !slices.Equal(got, tc.want) {
			t.Errorf("splitLakeName(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}

// TestFirstRows checks that bronze rows are kept and printed by position,
// the first limit of them whatever order the scan returns them in.
func TestFirstRows(t *testing.T) {
	type pos struct{ lsn, seq int64 }
	in := []pos{{30, 1}, {30, 2}, {10, 3}, {20, 1}, {10, 1}, {40, 1}, {10, 2}}
	for _, tc := range []struct {
		limit int
		want  []pos
	}{
		{0, []pos{{10, 1}, {10, 2}, {10, 3}, {20, 1}, {30, 1}, {30, 2}, {40, 1}}},
		{3, []pos{{10, 1}, {10, 2}, {10, 3}}},
		{5, []pos{{10, 1}, {10, 2}, {10, 3}, {20, 1}, {30, 1}}},
		{100, []pos{{10, 1}, {10, 2}, {10, 3}, {20, 1}, {30, 1}, {30, 2}, {40, 1}}},
	} {
		f := &firstRows{limit: tc.limit}
		for _, p := range in {
			f.add([]sortVal{{isNum: true, n: p.lsn, num: float64(p.lsn)}, {isNum: true, n: p.seq, num: float64(p.seq)}}, func() any { return p })
		}
		var got []pos
		for _, r := range f.sorted() {
			got = append(got, r.row.(pos))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("limit %d: got %v, want %v", tc.limit, got, tc.want)
		}
		if tc.limit > 0 && len(f.rows) > tc.limit {
			t.Errorf("limit %d: kept %d rows", tc.limit, len(f.rows))
		}
	}
}

func TestSortValOrder(t *testing.T) {
	// NULL first, numbers by value, text by text; int64s beyond float64's precision
	vals := []sortVal{{null: true}, {isNum: true, n: -5, num: -5}, {isNum: true, n: 2, num: 2}, {isNum: true, n: 10, num: 10},
		{isNum: true, n: 1<<53 + 1, num: float64(1<<53 + 1)}, {isNum: true, n: 1<<53 + 2, num: float64(1<<53 + 2)}}
	for i := range vals {
		for j := range vals {
			if got, want := vals[i].compare(vals[j]), cmp.Compare(i, j); got != want {
				t.Errorf("compare(%v, %v) = %d, want %d", vals[i], vals[j], got, want)
			}
		}
	}
	if (sortVal{text: "a"}).compare(sortVal{text: "b"}) >= 0 {
		t.Error("text is not compared as text")
	}
}
