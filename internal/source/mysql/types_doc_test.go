package mysql_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/source/mysql/mysqltest"
)

const (
	docPath  = "../../../docs/type-mapping.md"
	docBegin = "<!-- mysql-types:begin (generated from internal/source/mysql/testdata/mysql_types.golden by TestTypeMappingDoc -update) -->"
	docEnd   = "<!-- mysql-types:end -->"
)

// TestTypeMappingDoc checks that the MySQL table of docs/type-mapping.md
// is the one testdata/mysql_types.golden shows for a real MariaDB (run
// with -update to rewrite it after TestGolden -update).
func TestTypeMappingDoc(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "mysql_types.golden"))
	if err != nil {
		t.Fatal(err)
	}
	table := docTable(t, string(golden))
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	i, j := strings.Index(string(doc), docBegin), strings.Index(string(doc), docEnd)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q … %q block", docPath, docBegin, docEnd)
	}
	have := string(doc[i+len(docBegin) : j])
	if *update {
		out := string(doc[:i+len(docBegin)]) + table + string(doc[j:])
		if err := os.WriteFile(docPath, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if have != table {
		t.Errorf("the MySQL table of %s differs from %s (run go test ./internal/source/mysql -run TestTypeMappingDoc -update):\n%s",
			docPath, "testdata/mysql_types.golden", lineDiff(have, table))
	}
}

// docTable renders one line per golden column: its type, its Iceberg
// type, and its first non-NULL example as the server sent it and as the
// lake stores it.
func docTable(t *testing.T, golden string) string {
	var b strings.Builder
	b.WriteString("\n| test column | MariaDB type | Iceberg type | example: SELECT text → lake value |\n|---|---|---|---|\n")
	cols := mysqltest.ParseGolden(golden)
	if len(cols) == 0 {
		t.Fatal("no columns in the golden file")
	}
	for _, c := range cols {
		example := ""
		for _, v := range c.Values {
			if v.Text != "NULL" && !strings.HasPrefix(v.Lake, "DEAD LETTER") {
				example = "`" + mdEscape(cut(v.Text, 60)) + "` → `" + mdEscape(cut(v.Lake, 60)) + "`"
				break
			}
		}
		src, gen := c.Source, ""
		for _, g := range []string{" virtual generated", " stored generated"} {
			if strings.HasSuffix(src, g) {
				src, gen = strings.TrimSuffix(src, g), g
			}
		}
		fmt.Fprintf(&b, "| %s | `%s`%s | `%s` | %s |\n", c.Name, mdEscape(src), gen, c.Iceberg, example)
	}
	return b.String()
}

// cut shortens s to at most n runes.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// mdEscape keeps a value inside a Markdown table cell's code span.
func mdEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "`", "'")
}
