package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sys/unix"

	"github.com/tidemark/tidemark/internal/lake"
)

// The catalog of a Delta lake is its warehouse directory itself: Delta has
// no catalog of its own on a filesystem, and none is needed.
//
//	<warehouse>/bronze/                              namespace ["bronze"]
//	<warehouse>/bronze/_tidemark_namespace.json      its properties (a JSON object)
//	<warehouse>/bronze/src/public/orders/_delta_log/ table bronze.src.public.orders
//	<warehouse>/_tidemark/dropped/<ident>-<uuid>/    dropped tables (Drop)
//
// A namespace is a directory holding NamespaceFile; a table is a
// directory holding a Delta log. Readers (delta-rs, Spark, DuckDB) open a
// table by its directory.

// NamespaceFile is the file that makes a directory of the warehouse a
// namespace; it holds the namespace's properties as a JSON object.
const NamespaceFile = "_tidemark_namespace.json"

// droppedDir is where Drop moves tables, under the warehouse.
const droppedDir = "_tidemark/dropped"

// The catalog's errors are package lake's sentinels.
var (
	ErrNoSuchNamespace   = lake.ErrNoSuchNamespace
	ErrInvalidIdentifier = lake.ErrInvalidIdentifier
)

// Catalog is a lake.Catalog over a warehouse directory of the local
// filesystem. Its methods are safe for concurrent use; several processes
// may share a warehouse (commits are put-if-absent, renames refuse an
// existing target), except that SetNamespaceProperties of two processes at
// once on one namespace may lose one of the updates (last writer wins).
type Catalog struct {
	warehouse string
	mu        sync.Mutex // namespace property files of this process
}

var _ lake.Catalog = (*Catalog)(nil)

// OpenCatalog opens the warehouse directory (created if missing) as a
// catalog. warehouse may be a path or a file:// URI.
func OpenCatalog(warehouse string) (*Catalog, error) {
	dir := warehouse
	if strings.HasPrefix(dir, "file://") {
		dir = strings.TrimPrefix(dir, "file://")
	} else if strings.Contains(dir, "://") {
		return nil, fmt.Errorf("Delta lake at %s: %w: only a local directory can hold a Delta warehouse (no object store yet)", warehouse, ErrUnsupported)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("Delta lake at %s: %w", warehouse, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("Delta lake at %s: %w", warehouse, err)
	}
	return &Catalog{warehouse: abs}, nil
}

// Warehouse returns the warehouse directory.
func (c *Catalog) Warehouse() string { return c.warehouse }

// Close releases nothing: the catalog holds no resource.
func (c *Catalog) Close() error { return nil }

func joinIdent(ident []string) string { return strings.Join(ident, ".") }

// validLevels checks the levels of a namespace or table identifier: not
// empty, no '.' (the package lake rule), and a usable directory name.
func validLevels(ident []string) error {
	if len(ident) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidIdentifier)
	}
	for i, l := range ident {
		switch {
		case l == "" || strings.ContainsAny(l, "./\\\x00"):
			return fmt.Errorf("%w: level %q (empty, or holding '.', '/', '\\' or NUL)", ErrInvalidIdentifier, l)
		case l == logDir || l == NamespaceFile:
			return fmt.Errorf("%w: level %q is a name the Delta layout uses", ErrInvalidIdentifier, l)
		case i == 0 && l == "_tidemark":
			return fmt.Errorf("%w: the top level %q is where tidemark keeps its own files", ErrInvalidIdentifier, l)
		}
	}
	return nil
}

func validTable(ident []string) error {
	if len(ident) < 2 {
		return fmt.Errorf("%w: a table needs a namespace and a name", ErrInvalidIdentifier)
	}
	return validLevels(ident)
}

func (c *Catalog) path(ident []string) string {
	return filepath.Join(append([]string{c.warehouse}, ident...)...)
}

// isTable reports whether dir holds a Delta log with a commit or checkpoint.
func isTable(dir string) bool {
	l, err := listLog(dir)
	return err == nil && (len(l.commits) > 0 || len(l.checkpoints) > 0)
}

func isNamespace(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, NamespaceFile))
	return err == nil
}

// EnsureNamespace creates the namespace and its parents if missing.
func (c *Catalog) EnsureNamespace(ctx context.Context, ns []string) error {
	if err := validLevels(ns); err != nil {
		return fmt.Errorf("Delta lake: namespace %q: %w", ns, err)
	}
	for i := 1; i <= len(ns); i++ {
		dir := c.path(ns[:i])
		if isTable(dir) {
			return fmt.Errorf("Delta lake: namespace %s: %w: it is a table", joinIdent(ns[:i]), ErrTableExists)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("Delta lake: create namespace %s: %w", joinIdent(ns[:i]), err)
		}
		f, err := os.OpenFile(filepath.Join(dir, NamespaceFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("Delta lake: create namespace %s: %w", joinIdent(ns[:i]), err)
		}
		_, werr := f.WriteString("{}\n")
		if err := errors.Join(werr, f.Sync(), f.Close(), syncDir(dir), syncDir(filepath.Dir(dir))); err != nil {
			return fmt.Errorf("Delta lake: create namespace %s: %w", joinIdent(ns[:i]), err)
		}
	}
	return nil
}

// NamespaceProperties returns the properties of ns.
func (c *Catalog) NamespaceProperties(ctx context.Context, ns []string) (map[string]string, error) {
	if err := validLevels(ns); err != nil {
		return nil, fmt.Errorf("Delta lake: namespace %q: %w", ns, err)
	}
	data, err := os.ReadFile(filepath.Join(c.path(ns), NamespaceFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("Delta lake: namespace %s: %w", joinIdent(ns), ErrNoSuchNamespace)
	}
	if err != nil {
		return nil, fmt.Errorf("Delta lake: namespace %s: %w", joinIdent(ns), err)
	}
	props := map[string]string{}
	if err := json.Unmarshal(data, &props); err != nil {
		return nil, fmt.Errorf("Delta lake: namespace %s: %s is not a JSON object of strings (fix or remove it): %w", joinIdent(ns), filepath.Join(c.path(ns), NamespaceFile), err)
	}
	return props, nil
}

// SetNamespaceProperties merges props into the properties of ns
// (replacing the file atomically).
func (c *Catalog) SetNamespaceProperties(ctx context.Context, ns []string, props map[string]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur, err := c.NamespaceProperties(ctx, ns)
	if err != nil {
		return err
	}
	maps.Copy(cur, props)
	data, err := json.MarshalIndent(cur, "", "  ")
	if err != nil {
		return err
	}
	_, err = writeFileAtomic(filepath.Join(c.path(ns), NamespaceFile), func(w io.WriteCloser) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("Delta lake: set properties of namespace %s: %w", joinIdent(ns), err)
	}
	return nil
}

// ListNamespaces returns every namespace, sorted.
func (c *Catalog) ListNamespaces(ctx context.Context) ([][]string, error) {
	var out [][]string
	var walk func(prefix []string) error
	walk = func(prefix []string) error {
		ents, err := os.ReadDir(c.path(prefix))
		if err != nil {
			return err
		}
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			ns := append(slices.Clone(prefix), e.Name())
			if validLevels(ns) != nil || !isNamespace(c.path(ns)) {
				continue
			}
			out = append(out, ns)
			if err := walk(ns); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(nil); err != nil {
		return nil, fmt.Errorf("Delta lake at %s: list namespaces: %w", c.warehouse, err)
	}
	slices.SortFunc(out, compareIdents)
	return out, nil
}

func compareIdents(a, b []string) int { return slices.Compare(a, b) }

// ListTables returns the tables directly in ns, sorted.
func (c *Catalog) ListTables(ctx context.Context, ns []string) ([][]string, error) {
	if err := validLevels(ns); err != nil {
		return nil, fmt.Errorf("Delta lake: namespace %q: %w", ns, err)
	}
	if !isNamespace(c.path(ns)) {
		return nil, fmt.Errorf("Delta lake: list tables of %s: %w", joinIdent(ns), ErrNoSuchNamespace)
	}
	ents, err := os.ReadDir(c.path(ns))
	if err != nil {
		return nil, fmt.Errorf("Delta lake: list tables of %s: %w", joinIdent(ns), err)
	}
	var out [][]string
	for _, e := range ents {
		id := append(slices.Clone(ns), e.Name())
		if e.IsDir() && validTable(id) == nil && isTable(c.path(id)) {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, compareIdents)
	return out, nil
}

// TablesUnder is lake.TablesUnder.
func (c *Catalog) TablesUnder(ctx context.Context, prefix []string) ([][]string, error) {
	return lake.TablesUnder(ctx, c, prefix)
}

// Open loads the table ident.
func (c *Catalog) Open(ctx context.Context, ident []string) (lake.KeyedTable, error) {
	if err := validTable(ident); err != nil {
		return nil, fmt.Errorf("Delta lake: open table %q: %w", ident, err)
	}
	t, err := Open(ctx, c.path(ident))
	if err != nil {
		return nil, fmt.Errorf("Delta lake: open table %s: %w", joinIdent(ident), err)
	}
	return newLakeTable(ident, t), nil
}

// Create creates the table ident (and its namespace) from a neutral spec:
//
//   - without Key, a change log (bronze, dead letters): append-only
//     (delta.appendOnly) with the change data feed on
//     (delta.enableChangeDataFeed), partitioned by day of DayPartition;
//   - without Key but with DeleteMode copy-on-write, a table whose rows
//     merges delete and replace (gold), with the change data feed on;
//   - with Key, a keyed table (silver), with the change data feed on
//     (merges write change data files, keyed by the tidemark.key property)
//     and deletion vectors (delta.enableDeletionVectors) when DeleteMode is
//     merge-on-read (the default), without them for copy-on-write. Delta
//     has no identifier fields and this writer no bucketing: Key and
//     Buckets lay nothing out.
//
// PlaceAs is not needed: a table's files are in its directory, and Rename
// moves the directory.
func (c *Catalog) Create(ctx context.Context, ident []string, spec lake.TableSpec) (lake.KeyedTable, error) {
	if err := validTable(ident); err != nil {
		return nil, fmt.Errorf("Delta lake: create table %q: %w", ident, err)
	}
	if spec.Schema == nil {
		return nil, fmt.Errorf("Delta lake: create table %s: no schema", joinIdent(ident))
	}
	if err := c.EnsureNamespace(ctx, ident[:len(ident)-1]); err != nil {
		return nil, err
	}
	dir := c.path(ident)
	if isNamespace(dir) {
		return nil, fmt.Errorf("Delta lake: create table %s: %w: a namespace has that name", joinIdent(ident), ErrTableExists)
	}
	ds := Spec{
		Schema:       spec.Schema,
		DayPartition: spec.DayPartition,
		Name:         ident[len(ident)-1],
		Properties:   spec.Properties,
	}
	switch {
	case len(spec.Key) == 0 && spec.DeleteMode == lake.CopyOnWrite:
		// A table without a key whose rows are replaced (gold).
		ds.ChangeDataFeed = true
	case len(spec.Key) == 0:
		ds.AppendOnly, ds.ChangeDataFeed = true, true
	case spec.DeleteMode == "" || spec.DeleteMode == lake.MergeOnRead:
		ds.DeletionVectors, ds.ChangeDataFeed = true, true
	case spec.DeleteMode == lake.CopyOnWrite:
		ds.ChangeDataFeed = true
	default:
		return nil, fmt.Errorf("Delta lake: create table %s: delete mode %q: want %s or %s", joinIdent(ident), spec.DeleteMode, lake.MergeOnRead, lake.CopyOnWrite)
	}
	t, err := Create(ctx, dir, ds)
	if err != nil {
		return nil, fmt.Errorf("Delta lake: create table %s: %w", joinIdent(ident), err)
	}
	return newLakeTable(ident, t), nil
}

// Rename moves the table's directory to to's place (creating to's
// namespace) in one rename(2) that refuses an existing target
// (RENAME_NOREPLACE). The files move with it: add paths are relative.
func (c *Catalog) Rename(ctx context.Context, from, to []string) (lake.KeyedTable, error) {
	if err := validTable(from); err != nil {
		return nil, fmt.Errorf("Delta lake: rename table %q: %w", from, err)
	}
	if err := validTable(to); err != nil {
		return nil, fmt.Errorf("Delta lake: rename table %s to %q: %w", joinIdent(from), to, err)
	}
	if !isTable(c.path(from)) {
		return nil, fmt.Errorf("Delta lake: rename table %s: %w", joinIdent(from), ErrNoSuchTable)
	}
	if isTable(c.path(to)) || isNamespace(c.path(to)) {
		return nil, fmt.Errorf("Delta lake: rename table %s to %s: %w", joinIdent(from), joinIdent(to), ErrTableExists)
	}
	if err := c.EnsureNamespace(ctx, to[:len(to)-1]); err != nil {
		return nil, err
	}
	if err := renameNoReplace(c.path(from), c.path(to)); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("Delta lake: rename table %s to %s: %w", joinIdent(from), joinIdent(to), ErrTableExists)
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("Delta lake: rename table %s: %w", joinIdent(from), ErrNoSuchTable)
		}
		return nil, fmt.Errorf("Delta lake: rename table %s to %s: %w", joinIdent(from), joinIdent(to), err)
	}
	return c.Open(ctx, to)
}

// renameNoReplace renames from to to, atomically, failing with
// os.ErrExist when to exists (even as an empty directory), and syncs both
// parent directories.
func renameNoReplace(from, to string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return errors.Join(syncDir(filepath.Dir(from)), syncDir(filepath.Dir(to)))
}

// Drop removes the table from the catalog by moving its directory, in one
// rename, to <warehouse>/_tidemark/dropped/<ident>-<uuid>: no reader or
// listing finds it under its name any more, and its files stay there
// (nothing deletes them yet: remove that directory by hand to free the
// space).
func (c *Catalog) Drop(ctx context.Context, ident []string) error {
	if err := validTable(ident); err != nil {
		return fmt.Errorf("Delta lake: drop table %q: %w", ident, err)
	}
	if !isTable(c.path(ident)) {
		return fmt.Errorf("Delta lake: drop table %s: %w", joinIdent(ident), ErrNoSuchTable)
	}
	dst := filepath.Join(c.warehouse, filepath.FromSlash(droppedDir))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("Delta lake: drop table %s: %w", joinIdent(ident), err)
	}
	name := fmt.Sprintf("%s-%s-%s", joinIdent(ident), time.Now().UTC().Format("20060102T150405Z"), uuid.NewString()[:8])
	if err := renameNoReplace(c.path(ident), filepath.Join(dst, name)); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("Delta lake: drop table %s: %w", joinIdent(ident), ErrNoSuchTable)
		}
		return fmt.Errorf("Delta lake: drop table %s: %w", joinIdent(ident), err)
	}
	return nil
}
