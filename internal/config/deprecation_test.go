package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/config"
)

// TestDeprecations checks that a file giving a deprecated top-level key
// gets one deprecation naming the key, its line and its new spelling, and
// that the source block alone gets none (fold marks the top-level keys
// set for the block: that must not count as the file's own).
func TestDeprecations(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []string // Deprecation.String() after the file name
	}{
		{
			name: "old slot",
			body: "source: postgres://app@db/shop\nslot: shop_slot\n",
			want: []string{":2: slot: is deprecated; use source.slot instead (the old key still works)"},
		},
		{
			name: "old slot and publication",
			body: "source: postgres://app@db/shop\npublication: shop_pub\nwarehouse: /lake\nslot: shop_slot\n",
			want: []string{
				":4: slot: is deprecated; use source.slot instead (the old key still works)",
				":2: publication: is deprecated; use source.publication instead (the old key still works)",
			},
		},
		{
			name: "new block",
			body: "source:\n  url: postgres://app@db/shop\n  slot: shop_slot\n  publication: shop_pub\n",
		},
		{
			name: "plain source string",
			body: "source: postgres://app@db/shop\nwarehouse: /lake\n",
		},
		{
			name: "mixed: block slot, top-level publication",
			body: "source:\n  url: postgres://app@db/shop\n  slot: shop_slot\npublication: shop_pub\n",
			want: []string{":4: publication: is deprecated; use source.publication instead (the old key still works)"},
		},
		{
			name: "mixed: top-level slot, block publication",
			body: "slot: shop_slot\nsource:\n  url: postgres://app@db/shop\n  publication: shop_pub\n",
			want: []string{":1: slot: is deprecated; use source.slot instead (the old key still works)"},
		},
		{
			name: "old key through a merge key",
			body: "x-defaults: &d\n  slot: shop_slot\n<<: *d\nsource: postgres://app@db/shop\n",
			want: []string{":2: slot: is deprecated; use source.slot instead (the old key still works)"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.body)
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range cfg.Deprecations {
				got = append(got, d.String())
			}
			var want []string
			for _, w := range tc.want {
				want = append(want, path+w)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("deprecations:\n got %q\nwant %q", got, want)
			}
			// The block and the old keys set the same settings.
			if strings.Contains(tc.body, "shop_slot") && cfg.Slot != "shop_slot" {
				t.Errorf("slot %q, want shop_slot", cfg.Slot)
			}
		})
	}
}

// TestDeprecationsKeptByResolve checks that the file's deprecations
// survive the flags (a flag overriding the old key does not make the file
// right) and validation.
func TestDeprecationsKeptByResolve(t *testing.T) {
	path := writeFile(t, "source: postgres://app@db/shop\nslot: shop_slot\n")
	cfg, err := config.Resolve(newFlags(t, "--slot", "other_slot", "--publication", "other_pub"), path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Slot != "other_slot" {
		t.Errorf("slot %q, want the flag's other_slot", cfg.Slot)
	}
	if len(cfg.Deprecations) != 1 || cfg.Deprecations[0].Key != "slot" || cfg.Deprecations[0].Use != "source.slot" || cfg.Deprecations[0].Line != 2 || cfg.Deprecations[0].File != path {
		t.Errorf("deprecations %+v, want slot at %s:2 (flags are not deprecated)", cfg.Deprecations, path)
	}
	// Flags alone: nothing deprecated.
	cfg, err = config.Resolve(newFlags(t, "--source", "postgres://app@db/shop", "--slot", "other_slot"), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Deprecations) != 0 {
		t.Errorf("deprecations %+v from flags alone, want none", cfg.Deprecations)
	}
}

// TestDeprecationsNeverShowValues: a deprecation names the key, never what
// it was set to (a value may be a secret).
func TestDeprecationsNeverShowValues(t *testing.T) {
	const canary = "s3cr3t-canary"
	path := writeFile(t, "source: postgres://app:"+canary+"@db/shop\nslot: "+canary+"\npublication: \"pub_"+canary+"\"\n")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Deprecations) != 2 {
		t.Fatalf("deprecations %+v, want slot and publication", cfg.Deprecations)
	}
	for _, d := range cfg.Deprecations {
		for _, s := range []string{d.String(), fmt.Sprintf("%+v", d), fmt.Sprintf("%#v", d)} {
			if strings.Contains(s, canary) {
				t.Errorf("a deprecation shows the value: %s", s)
			}
		}
	}
}
