package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
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

// docDefaults returns the Default cell of every row of the settings tables
// in docs/configuration.md, by YAML key.
func docDefaults(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, " | ")
		if len(cells) < 4 || !strings.HasPrefix(cells[0], "| `") || !strings.HasPrefix(cells[1], "`--") {
			continue
		}
		out[strings.Trim(cells[0], "| `")] = strings.TrimSpace(cells[2])
	}
	return out
}

var backticked = regexp.MustCompile("`([^`]*)`")

// helpLine returns the line of usage that describes --name.
func helpLine(t *testing.T, usage, name string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s*--` + regexp.QuoteMeta(name) + `( .*)?$`)
	line := re.FindString(usage)
	if line == "" {
		t.Errorf("--help has no line for --%s:\n%s", name, usage)
	}
	return line
}

// TestDocsDefaultsMatchCode checks that the Default column of
// docs/configuration.md is what Validate fills in (Defaults), and what
// --help prints for each flag (BindFlags): a fixed default is printed as
// "(default X)", a derived or empty one is not.
func TestDocsDefaultsMatchCode(t *testing.T) {
	docs := docDefaults(t)
	var holder Config
	fs := pflag.NewFlagSet("tidemark", pflag.ContinueOnError)
	holder.BindFlags(fs)
	usage := fs.FlagUsages()
	def := Defaults()
	for _, f := range fields {
		cell, ok := docs[f.path]
		if !ok {
			t.Errorf("docs/configuration.md has no table row for `%s`", f.path)
			continue
		}
		code := valueOf(f.ptr(&def)).String()
		fl := fs.Lookup(f.flag)
		line := helpLine(t, usage, f.flag)
		// parse turns a documented value into the code's notation
		// ("10m" -> "10m0s"), or "" if it is not a value of the setting.
		parse := func(s string) string {
			var c Config
			v := valueOf(f.ptr(&c))
			if v.Set(strings.ReplaceAll(s, "<warehouse>", DefaultWarehouse)) != nil {
				return ""
			}
			return v.String()
		}
		// same compares paths as paths ("./lake/x" is "lake/x").
		same := func(doc, code string) bool {
			return doc == code || strings.Contains(code, "/") && filepath.Clean(doc) == filepath.Clean(code)
		}
		switch {
		case strings.HasPrefix(cell, "*derived*"):
			if !f.derived() {
				t.Errorf("`%s`: docs say derived, but its usage does not say \"(default: ...)\" (--help: %s)", f.path, line)
			}
			if fl.DefValue != "" {
				t.Errorf("`%s`: derived, but --help prints a fixed default: %s", f.path, line)
			}
			// A value in the cell ("(`16MiB`)") is the one derived from the
			// other defaults.
			if code != "" && code != "0B" {
				found := false
				for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
					if v := parse(m[1]); v != "" && same(v, code) {
						found = true
					}
				}
				if !found {
					t.Errorf("`%s`: derived default is %s with the other defaults; docs/configuration.md says %s", f.path, code, cell)
				}
			}
		case strings.HasPrefix(cell, "—"), strings.HasPrefix(cell, "empty"):
			if code != "" {
				t.Errorf("`%s`: docs say no default (%s), code's default is %q", f.path, cell, code)
			}
			if strings.Contains(line, "(default ") {
				t.Errorf("`%s`: docs say no default, --help prints one: %s", f.path, line)
			}
		default:
			m := backticked.FindStringSubmatch(cell)
			if m == nil {
				t.Errorf("`%s`: the Default cell %q names no `value`, *derived* or empty", f.path, cell)
				continue
			}
			if got := parse(m[1]); !same(got, code) {
				t.Errorf("`%s`: docs/configuration.md says the default is %s, the code's is %s", f.path, m[0], code)
			}
			want := "(default " + code + ")"
			if _, ok := valueOf(f.ptr(&def)).(*stringValue); ok {
				want = `(default "` + code + `")`
			}
			switch {
			case code == "false":
				if strings.Contains(line, "(default ") {
					t.Errorf("`%s`: --help prints a default for a false switch: %s", f.path, line)
				}
			case !strings.HasSuffix(line, want):
				t.Errorf("`%s`: --help should end in %s: %s", f.path, want, line)
			}
		}
	}
}

// readmeDefault matches a default stated in README.md or docs/*.md as
// "`--flag` (default `value`)".
var readmeDefault = regexp.MustCompile("`--([a-z-]+)` \\(default `([^`]*)`\\)")

// TestReadmeDefaultsMatchCode checks every "`--flag` (default `value`)" in
// README.md and docs/*.md against Defaults.
func TestReadmeDefaultsMatchCode(t *testing.T) {
	byFlag := map[string]*field{}
	for i := range fields {
		byFlag[fields[i].flag] = &fields[i]
	}
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	def := Defaults()
	inReadme := 0
	for _, file := range files {
		doc, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range readmeDefault.FindAllStringSubmatch(string(doc), -1) {
			f, ok := byFlag[m[1]]
			if !ok {
				continue // a flag of another command
			}
			if strings.HasSuffix(file, "README.md") {
				inReadme++
			}
			var c Config
			v := valueOf(f.ptr(&c))
			code := valueOf(f.ptr(&def)).String()
			if err := v.Set(m[2]); err != nil || v.String() != code {
				t.Errorf("%s: %s, but the default of --%s is %s", filepath.Base(file), m[0], f.flag, code)
			}
		}
	}
	if inReadme < 3 {
		t.Errorf("README.md states %d defaults as \"`--flag` (default `value`)\"; want its main ones (commit interval, silver cadence, memory budget)", inReadme)
	}
}
