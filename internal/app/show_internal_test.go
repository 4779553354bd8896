package app

import (
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
			f.add(p.lsn, p.seq, func() any { return p })
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
