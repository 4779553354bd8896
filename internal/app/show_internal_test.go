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
