package fault

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocsNameEveryCode: every named error in this package has a row in
// docs/operations.md's named-errors table with its class and exit code, and
// the table names no code that does not exist.
func TestDocsNameEveryCode(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // code -> "class → exit"
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([a-z]+ → [0-9])")
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]] = m[2]
	}
	code := map[string]string{}
	sentinel := regexp.MustCompile(`&Error\{Class: (\w+), Code: "([a-z_]+)"`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range sentinel.FindAllStringSubmatch(string(src), -1) {
			code[m[2]] = m[1]
		}
	}
	if len(code) < 10 {
		t.Fatalf("found only %d sentinels in the package: the pattern is stale", len(code))
	}
	exit := map[string]string{"Config": "configuration → 2", "Fatal": "fatal → 3", "Transient": "transient → 4", "Unknown": "unclassified → 1"}
	delete(code, "transient") // MarkTransient's: never printed, retried
	for c, class := range code {
		got, ok := rows[c]
		if !ok {
			t.Errorf("docs/operations.md has no named-errors row for %q", c)
			continue
		}
		if !strings.HasPrefix(got, exit[class]) {
			t.Errorf("docs/operations.md says %q is %q; the code says %q", c, got, exit[class])
		}
	}
	for c := range rows {
		if _, ok := code[c]; !ok && strings.Contains(rows[c], "→") {
			t.Errorf("docs/operations.md documents %q, which internal/fault does not define", c)
		}
	}
}
