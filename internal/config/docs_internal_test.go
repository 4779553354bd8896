package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestFieldsCoverConfig checks that every YAML key has exactly one flag.
func TestFieldsCoverConfig(t *testing.T) {
	byPath := map[string]bool{}
	for _, f := range fields {
		if byPath[f.path] {
			t.Errorf("%s listed twice in fields", f.path)
		}
		byPath[f.path] = true
		if want := strings.NewReplacer(".", "-", "_", "-").Replace(f.path); f.flag != want {
			t.Errorf("%s: flag --%s, want --%s", f.path, f.flag, want)
		}
	}
	for _, p := range allPaths() {
		if !byPath[p] {
			t.Errorf("YAML key %s has no flag", p)
		}
	}
	if len(byPath) != len(allPaths()) {
		t.Errorf("fields lists %d keys, Config has %d", len(byPath), len(allPaths()))
	}
	// ptr must point into the Config it is given.
	var c Config
	for _, f := range fields {
		if v := reflect.ValueOf(f.ptr(&c)); v.Kind() != reflect.Pointer || v.IsNil() {
			t.Errorf("%s: ptr returned %T", f.path, f.ptr(&c))
		}
	}
}

// TestDocsCoverConfig checks that docs/configuration.md documents every
// key and flag.
func TestDocsCoverConfig(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		if !strings.Contains(string(doc), "`"+f.path+"`") {
			t.Errorf("docs/configuration.md does not document `%s`", f.path)
		}
		if !strings.Contains(string(doc), "`--"+f.flag+"`") {
			t.Errorf("docs/configuration.md does not document `--%s`", f.flag)
		}
	}
}

// TestDocsExample checks that the example in docs/configuration.md loads
// and validates.
func TestDocsExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## Example\n")
	if !ok {
		t.Fatal("no ## Example section")
	}
	_, rest, _ = strings.Cut(rest, "```yaml\n")
	example, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("no yaml block in the example")
	}
	env := map[string]string{"TIDEMARK_PG_PASSWORD": "pw"}
	cfg, err := parse("example.yaml", []byte(example), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "shop" || len(cfg.Tables) != 3 || cfg.Log.Level != "info" || cfg.Snapshot.Parallelism != 4 {
		t.Errorf("example parsed as %v", cfg)
	}
}
