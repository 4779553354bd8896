package pipeline_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/tidemark/tidemark/"

// importExceptions are the non-test files outside a source that still
// import it, each with why; a listed file that no longer does fails the
// test too, so the list only shrinks.
var importExceptions = map[string]string{
	"internal/bench/mysql.go": "the bench (a tool, composed like cmd) gives its bare binlog-reader baseline the capture's own decoder settings (mysql.SyncerSettings), so the ratio compares like with like",
}

// clientLibraries are the source client libraries no neutral package may
// import: a source brings its own error rules (fault.Classifier).
var clientLibraries = []string{"github.com/jackc/", "github.com/go-mysql-org/"}

// neutral are the packages that must not import a client library.
var neutral = []string{"internal/change", "internal/coltype", "internal/pipeline", "internal/fault", "internal/bronze", "internal/silver", "internal/maintain"}

// TestSourcesAreImportedOnlyByTheCompositionRoot enforces the import rule
// of the source-neutral core (issue 13): a package under
// internal/source/<name> is imported only by that source itself,
// internal/app and cmd/tidemark (tests are free to use a real source), and
// the neutral packages import no source's client library. A failure names
// the file and the import.
func TestSourcesAreImportedOnlyByTheCompositionRoot(t *testing.T) {
	root := moduleRoot(t)
	var bad []string
	excepted := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		dir := filepath.ToSlash(filepath.Dir(rel))
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if src, ok := sourceOf(p); ok && !mayImportSource(dir, src) {
				if _, ok := importExceptions[rel]; ok {
					excepted[rel] = true
					continue
				}
				bad = append(bad, rel+" imports "+p+": only internal/source/"+src+", internal/app and cmd/tidemark may")
			}
			if isNeutral(dir) {
				for _, lib := range clientLibraries {
					if strings.HasPrefix(p, lib) {
						bad = append(bad, rel+" imports "+p+": a neutral package imports no source client library")
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for rel := range importExceptions {
		if !excepted[rel] {
			bad = append(bad, rel+" is listed in importExceptions but imports no source any more: remove it from the list")
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// sourceOf returns the source name of an import path under
// internal/source/<name>.
func sourceOf(p string) (string, bool) {
	rest, ok := strings.CutPrefix(p, module+"internal/source/")
	if !ok {
		return "", false
	}
	name, _, _ := strings.Cut(rest, "/")
	return name, true
}

func mayImportSource(dir, src string) bool {
	return dir == "internal/source/"+src || strings.HasPrefix(dir, "internal/source/"+src+"/") ||
		dir == "internal/app" || dir == "cmd/tidemark"
}

func isNeutral(dir string) bool {
	for _, n := range neutral {
		if dir == n || strings.HasPrefix(dir, n+"/") {
			return true
		}
	}
	return false
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
