package iceberg

import "testing"

func TestDirName(t *testing.T) {
	for _, name := range []string{"orders", "bronze.shop.public", "order_items-2", "Orders"} {
		if got := dirName(name); got != name {
			t.Errorf("dirName(%q) = %q, want it unchanged", name, got)
		}
	}
	seen := map[string]string{}
	for _, name := range []string{"a b", "a_b", "a?b", "a%20b", "a/b", "é", "e", "a b "} {
		got := dirName(name)
		if prev, dup := seen[got]; dup {
			t.Errorf("dirName(%q) = dirName(%q) = %q", name, prev, got)
		}
		seen[got] = name
		for _, r := range got {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
				t.Errorf("dirName(%q) = %q contains %q", name, got, r)
			}
		}
	}
}

func TestPartitionFieldName(t *testing.T) {
	for col, want := range map[string]string{
		"id":           "id_bucket",
		"Order_ID":     "Order_ID_bucket",
		"k ey":         "k_x20ey_bucket",
		"ключ":         "_x43A_x43B_x44E_x447_bucket",
		"1st":          "_1st_bucket",
		"col.with.dot": "col_x2Ewith_x2Edot_bucket",
	} {
		if got := partitionFieldName(col, "bucket"); got != want {
			t.Errorf("partitionFieldName(%q) = %q, want %q", col, got, want)
		}
	}
}
