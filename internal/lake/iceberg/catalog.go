// Package iceberg is tidemark's thin wrapper over iceberg-go: a SQL catalog
// (SQLite by default, PostgreSQL for teams) over a warehouse on the local
// filesystem, and tables that bronze and silver append to and read from.
//
// What the wrapper adds to iceberg-go, and why:
//
//   - one way to open a catalog, with every property passed explicitly
//     (catalog.Load would also read ~/.iceberg-go.yaml);
//   - identifiers as plain []string, validated so that PyIceberg, Spark and
//     Trino resolve the same dotted names (no '.' inside a level);
//   - Append commits many record batches as one snapshot whose summary
//     carries the caller's keys (tidemark.position, ...) atomically with the
//     data, and retries a commit that lost a race;
//   - a checked schema for written records: a record whose columns the
//     table does not have, or of an incompatible type, is refused before any
//     file is written;
//   - schema evolution limited to what a CDC pipeline needs and what every
//     reader handles: new optional columns and type widening.
//
// The layout on disk is plain Iceberg (format version 2): a table
// bronze.shop.public.orders lives in
// <warehouse>/bronze.shop.public.db/orders/{metadata,data} (a level that
// would need URL escaping, such as "Order Items", gets a sanitized
// directory name with a hash suffix; the catalog keeps the real name), and
// the SQLite catalog at <warehouse>/catalog.db is the JDBC/PyIceberg
// SqlCatalog schema (tables iceberg_tables and iceberg_namespace_properties,
// catalog name "tidemark", namespace stored as the dot-joined levels).
// PyIceberg opens it with
//
//	SqlCatalog("tidemark", uri="sqlite:///<warehouse>/catalog.db", warehouse="file://<warehouse>")
//
// A *Catalog is safe for concurrent use. A *Table is safe for concurrent
// use too; its mutating methods are serialized.
package iceberg

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/uptrace/bun/driver/sqliteshim"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/storage"
)

// CatalogName is the name every tidemark catalog has. It is stored in every
// row of the SQL catalog, so other engines must use the same name.
const CatalogName = "tidemark"

// Sentinel errors, to be checked with errors.Is. They are package lake's:
// errors of iceberg-go that mean the same (catalog.ErrNoSuchTable, …) are
// wrapped by neutral so that both match.
var (
	ErrNoSuchTable     = lake.ErrNoSuchTable
	ErrTableExists     = lake.ErrTableExists
	ErrNoSuchNamespace = lake.ErrNoSuchNamespace
	// ErrInvalidIdentifier: an empty identifier, an empty level, or a level
	// containing '.'.
	ErrInvalidIdentifier = lake.ErrInvalidIdentifier
	// ErrIncompatibleType: a type change or a written column that readers
	// could not reconcile with the table's schema.
	ErrIncompatibleType = lake.ErrIncompatibleType
)

// neutralErrs maps iceberg-go's sentinel errors to package lake's.
var neutralErrs = []struct{ ice, lake error }{
	{catalog.ErrNoSuchTable, lake.ErrNoSuchTable},
	{catalog.ErrTableAlreadyExists, lake.ErrTableExists},
	{catalog.ErrNoSuchNamespace, lake.ErrNoSuchNamespace},
	{catalog.ErrInvalidIdentifier, lake.ErrInvalidIdentifier},
}

// neutral makes an error that wraps one of iceberg-go's sentinel errors
// also match package lake's (errors.Is), without changing its text.
func neutral(err error) error {
	if err == nil {
		return nil
	}
	for _, m := range neutralErrs {
		if errors.Is(err, m.ice) && !errors.Is(err, m.lake) {
			return &lakeError{err: err, is: m.lake}
		}
	}
	return err
}

// lakeError is err, matching is as well.
type lakeError struct {
	err error
	is  error
}

func (e *lakeError) Error() string        { return e.err.Error() }
func (e *lakeError) Unwrap() error        { return e.err }
func (e *lakeError) Is(target error) bool { return target == e.is }

// Config says where the catalog and the warehouse are.
type Config struct {
	// Warehouse is the local directory that holds table data and metadata,
	// or an S3 prefix, "s3://bucket/prefix" (reached as package storage
	// says: the AWS SDK's environment). A relative path is made absolute;
	// a local directory is created if missing. The absolute path must not
	// need URL escaping (no spaces, '%', '?', '#' or non-ASCII): Iceberg
	// stores locations as file:// URLs, which engines decode differently.
	Warehouse string
	// CatalogURI is "" for a SQLite catalog at <Warehouse>/catalog.db, a
	// "postgres://" / "postgresql://" URL for a catalog in PostgreSQL (the
	// tables are created in the connection's current schema), or a
	// "rest+http://" / "rest+https://" URL of an Iceberg REST catalog
	// (see restCatalog). An S3 warehouse needs PostgreSQL or REST: SQLite's
	// file cannot live in a bucket.
	CatalogURI string
	// ReadOnly opens an existing catalog for reading only (tidemark status,
	// show): the warehouse is not created, the SQLite file is opened with
	// mode=ro and no catalog table is created, so a user who may only read
	// the warehouse can use it. Writing through a read-only catalog fails.
	ReadOnly bool
}

// Catalog is an open Iceberg catalog. Close it when done.
type Catalog struct {
	db           *sql.DB              // the SQL catalog's database; nil for REST
	cat          catalog.Catalog      // iceberg-go's SQL or REST catalog
	warehouse    string               // absolute directory, or the s3:// URL
	warehouseURL string               // file:// or s3:// URL of warehouse, needing no escaping
	where        string               // the catalog file, or the redacted catalog URL (for errors)
	postgres     bool                 // a PostgreSQL catalog ($n placeholders)
	props        iceberggo.Properties // the catalog's, which it opens table files with
}

// IsRESTCatalog reports whether uri names an Iceberg REST catalog.
func IsRESTCatalog(uri string) bool {
	return strings.HasPrefix(uri, "rest+http://") || strings.HasPrefix(uri, "rest+https://")
}

// Open opens (creating if needed) the catalog described by cfg.
func Open(ctx context.Context, cfg Config) (*Catalog, error) {
	if cfg.Warehouse == "" {
		return nil, errors.New("iceberg: open catalog: warehouse directory is empty")
	}
	if storage.IsRemote(cfg.Warehouse) {
		return openRemote(ctx, cfg)
	}
	wh, err := filepath.Abs(cfg.Warehouse)
	if err != nil {
		return nil, fmt.Errorf("iceberg: open catalog: warehouse %q: %w", cfg.Warehouse, err)
	}
	// iceberg-go stores file locations as URLs, percent-encoded
	// ("my%20lake"); PyIceberg (and other engines) take them verbatim and
	// look for a directory named "my%20lake". Only paths that encoding leaves
	// alone are read the same everywhere.
	if esc := (&url.URL{Path: filepath.ToSlash(wh)}).EscapedPath(); esc != filepath.ToSlash(wh) {
		return nil, fmt.Errorf("iceberg: open catalog: warehouse %q: the path must not need URL escaping "+
			"(no spaces, '%%', '?', '#' or non-ASCII characters): other Iceberg engines would not find the files", wh)
	}
	if cfg.ReadOnly {
		if _, err := os.Stat(wh); err != nil {
			return nil, warehouseError(wh, "read", err)
		}
	} else {
		if err := os.MkdirAll(wh, 0o755); err != nil {
			return nil, warehouseError(wh, "create", err)
		}
		if err := checkWritable(wh, cfg.CatalogURI == ""); err != nil {
			return nil, warehouseError(wh, "write", err)
		}
	}
	whURL := (&url.URL{Scheme: "file", Path: filepath.ToSlash(wh)}).String()
	if IsRESTCatalog(cfg.CatalogURI) {
		return openREST(ctx, cfg.CatalogURI, wh, whURL, nil)
	}
	return openSQL(ctx, cfg, wh, whURL, nil)
}

// openRemote opens the catalog of a warehouse on object storage: its URL
// checked, the bucket probed (so that a missing bucket or refused
// credentials is a named error now, not deep inside the first commit),
// and the catalog — PostgreSQL or REST — opened with the store's FileIO
// properties.
func openRemote(ctx context.Context, cfg Config) (*Catalog, error) {
	wh, err := storage.ParseS3(cfg.Warehouse)
	if err != nil {
		return nil, err
	}
	if cfg.CatalogURI == "" {
		return nil, fault.With(fault.ErrBadConfig, fmt.Sprintf("the warehouse %s is on S3 and needs a shared catalog: "+
			"set --catalog to rest+https://host:port (an Iceberg REST catalog) or postgres://… (the SQLite catalog is a local file)", wh), nil)
	}
	if err := storage.Check(ctx, wh, !cfg.ReadOnly); err != nil {
		return nil, err
	}
	if IsRESTCatalog(cfg.CatalogURI) {
		return openREST(ctx, cfg.CatalogURI, wh, wh, storage.S3Props())
	}
	return openSQL(ctx, cfg, wh, wh, storage.S3Props())
}

// openSQL opens the SQLite (in the local warehouse wh) or PostgreSQL
// catalog of cfg; ioProps are the FileIO properties of the warehouse.
func openSQL(ctx context.Context, cfg Config, wh, whURL string, ioProps map[string]string) (*Catalog, error) {
	var (
		driver, dsn, where string
		dialect            sqlcat.SupportedDialect
		secrets            []string
	)
	switch {
	case cfg.CatalogURI == "" && !storage.IsRemote(wh):
		driver, dialect = sqliteshim.ShimName, sqlcat.SQLite
		// WAL lets readers (PyIceberg, a query command) run while we commit;
		// the busy timeout makes concurrent writers wait instead of failing
		// with "database is locked".
		dsn = "file:" + filepath.Join(wh, "catalog.db") +
			"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
		if cfg.ReadOnly {
			// The journal mode is the writer's to set (the file is in WAL
			// mode since its first open); see readableSQLite.
			dsn = "file:" + filepath.Join(wh, "catalog.db") + "?mode=ro&_pragma=busy_timeout(10000)"
		}
		where = filepath.Join(wh, "catalog.db")
	case strings.HasPrefix(cfg.CatalogURI, "postgres://"), strings.HasPrefix(cfg.CatalogURI, "postgresql://"):
		u, perr := url.Parse(cfg.CatalogURI)
		if perr != nil {
			// Never echo the URI or the parser's message: both may hold the password.
			return nil, errors.New("iceberg: open catalog: catalog URI is not a valid postgres:// URL")
		}
		if pw, ok := u.User.Password(); ok && pw != "" {
			// The decoded password, and as it is spelled in the URL.
			secrets = append(secrets, pw, url.QueryEscape(pw), url.PathEscape(pw))
		}
		driver, dialect, dsn = "pgx", sqlcat.Postgres, cfg.CatalogURI
		where = u.Redacted()
	default:
		return nil, fault.With(fault.ErrBadConfig, `catalog: must be empty (SQLite in the warehouse), a postgres:// URL or a rest+http(s):// URL of an Iceberg REST catalog`, nil)
	}

	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, redact(fmt.Errorf("iceberg: open catalog %s: %w", where, err), secrets...)
	}
	// Opening SQLite sets WAL mode and creates the catalog's tables: with
	// another process opening or committing to the same catalog.db at that
	// moment, SQLite can answer SQLITE_BUSY at once, without its busy
	// timeout. Both steps are idempotent: retried a few times.
	if cfg.ReadOnly && dialect == sqlcat.SQLite {
		db, err = readableSQLite(ctx, db, where)
	} else {
		err = retryBusy(ctx, func() error { return db.PingContext(ctx) })
	}
	if err != nil {
		_ = db.Close()
		return nil, redact(classifyOpen(fmt.Errorf("iceberg: open catalog %s: %w", where, err), where, wh, cfg.ReadOnly), secrets...)
	}

	props := iceberggo.Properties{
		sqlcat.DriverKey:      driver,
		sqlcat.DialectKey:     string(dialect),
		"init_catalog_tables": strconv.FormatBool(!cfg.ReadOnly),
		"warehouse":           whURL,
	}
	for k, v := range ioProps {
		props[k] = v
	}
	var cat *sqlcat.Catalog
	err = retryBusy(ctx, func() (err error) {
		cat, err = sqlcat.NewCatalog(CatalogName, db, dialect, props)
		return err
	})
	if err != nil {
		_ = db.Close()
		return nil, redact(classifyOpen(fmt.Errorf("iceberg: open catalog %s: %w", where, err), where, wh, cfg.ReadOnly), secrets...)
	}
	return &Catalog{db: db, cat: cat, warehouse: wh, warehouseURL: whURL, where: where, postgres: dialect == sqlcat.Postgres, props: props}, nil
}

// readableSQLite reads from db, a SQLite catalog opened with mode=ro, and
// returns it, or another handle that can read it. SQLite reads a WAL
// database read-only when its -wal and -shm files exist (a writer has it
// open) or it may create them; a user who may not write the directory, with
// no writer running (no -wal file), gets "attempt to write a readonly
// database". Then nothing is changing the file, and it is opened as
// immutable (no locks, no -shm), the way SQLite documents for read-only
// media.
func readableSQLite(ctx context.Context, db *sql.DB, path string) (*sql.DB, error) {
	probe := func(db *sql.DB) error {
		var n int
		return retryBusy(ctx, func() error {
			if err := db.PingContext(ctx); err != nil {
				return err
			}
			return db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master`).Scan(&n)
		})
	}
	err := probe(db)
	if err == nil {
		return db, nil
	}
	switch sqliteCode(err) {
	case sqliteReadOnly, sqliteCantOpen:
	default:
		return db, err
	}
	if _, serr := os.Stat(path + "-wal"); !errors.Is(serr, fs.ErrNotExist) {
		return db, err
	}
	imm, oerr := sql.Open(sqliteshim.ShimName, "file:"+path+"?mode=ro&immutable=1")
	if oerr != nil {
		return db, err
	}
	if ierr := probe(imm); ierr != nil {
		_ = imm.Close()
		return db, ierr
	}
	_ = db.Close()
	return imm, nil
}

// checkWritable makes sure the user running tidemark may write the
// warehouse directory (and an existing SQLite catalog file and its WAL
// files) before anything is written: otherwise the first commit fails
// deep inside SQLite or Parquet with a message that names neither.
func checkWritable(wh string, sqlite bool) error {
	f, err := os.CreateTemp(wh, ".tidemark-write-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	_ = f.Close()
	if err := os.Remove(name); err != nil {
		return err
	}
	if !sqlite {
		return nil
	}
	for _, p := range []string{"catalog.db", "catalog.db-wal", "catalog.db-shm"} {
		f, err := os.OpenFile(filepath.Join(wh, p), os.O_WRONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		_ = f.Close()
	}
	return nil
}

// SQLite result codes of a catalog file the process may not open or write.
const (
	sqlitePerm     = 3  // SQLITE_PERM
	sqliteReadOnly = 8  // SQLITE_READONLY: "attempt to write a readonly database"
	sqliteCantOpen = 14 // SQLITE_CANTOPEN: "unable to open database file"
)

// classifyOpen classifies an error opening the catalog: a file the user may
// not open or write is fault.ErrWarehouseAccess (a configuration error, exit
// 2), anything else as classify does.
func classifyOpen(err error, where, wh string, readOnly bool) error {
	switch sqliteCode(err) {
	case sqlitePerm, sqliteReadOnly, sqliteCantOpen:
		if readOnly {
			return warehouseError(wh, "read", err)
		}
		return warehouseError(wh, "write", err)
	}
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return warehouseError(wh, "write", err)
	}
	return classify(err, "catalog "+where)
}

// warehouseError is the named configuration error for a warehouse that the
// user running tidemark may not create (op "create"), write or read, with
// the fix in one line. Other errors (a full disk) are classified as usual.
func warehouseError(wh, op string, err error) error {
	if isDiskFull(err) {
		return fault.MarkTransient(fmt.Errorf("iceberg: %s warehouse %s: %w", op, wh, err))
	}
	who, owner := "the user running tidemark", "<user>"
	if u, uerr := user.Current(); uerr == nil {
		who, owner = fmt.Sprintf("user %q", u.Username), u.Username
	}
	var msg string
	switch op {
	case "create":
		msg = fmt.Sprintf("cannot create the warehouse directory %s: create it and let %s write it (mkdir -p %s && chown %s %s), or choose another --warehouse",
			wh, who, wh, owner, wh)
	case "write":
		msg = fmt.Sprintf("%s may not write the warehouse %s (tidemark run writes data files and the catalog there): "+
			"give it write access (chown -R %s %s), or choose another --warehouse", who, wh, owner, wh)
	default:
		if errors.Is(err, fs.ErrNotExist) {
			return fault.With(fault.ErrBadConfig, fmt.Sprintf("no tidemark lake at %s: check --warehouse", wh), err)
		}
		msg = fmt.Sprintf("%s may not read the warehouse %s: give it read access to the directory and catalog.db (chmod -R a+rX %s), or check --warehouse",
			who, wh, wh)
	}
	return fault.With(fault.ErrWarehouseAccess, msg, err)
}

// retryBusy calls fn until it does not fail with SQLite's "database is
// locked" (SQLITE_BUSY, and its extended codes such as SQLITE_BUSY_SNAPSHOT,
// 517, which the driver prints as "database is locked (517)" without the
// name: a WAL reader's snapshot went stale beside a concurrent writer; fn's
// transaction did not commit, so calling it again is safe), at most 10 times, waiting 50 ms longer each time
// (about 2.75 s in all).
func retryBusy(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || attempt == 10 || !isBusy(err) {
			return err
		}
		lake.CountRetry(lake.RetryCatalogBusy)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
	}
}

// isBusy: SQLite's SQLITE_BUSY or one of its extended codes.
func isBusy(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked")
}

// Warehouse returns the absolute warehouse directory.
func (c *Catalog) Warehouse() string { return c.warehouse }

// Close releases the catalog's database connections. Tables loaded from it
// must not be used afterwards.
func (c *Catalog) Close() error {
	var err error
	if cl, ok := c.cat.(interface{ Close() error }); ok {
		err = cl.Close()
	}
	if c.db != nil {
		err = errors.Join(err, c.db.Close())
	}
	return err
}

// EnsureNamespace creates ns and every missing parent level (["bronze"],
// ["bronze","shop"], ...). It is idempotent and safe against a concurrent
// creator.
func (c *Catalog) EnsureNamespace(ctx context.Context, ns []string) error {
	if err := validateIdent(ns); err != nil {
		return fmt.Errorf("iceberg: ensure namespace %q: %w", ns, err)
	}
	for i := 1; i <= len(ns); i++ {
		level := table.Identifier(slices.Clone(ns[:i]))
		ok, err := c.cat.CheckNamespaceExists(ctx, level)
		if err != nil {
			return c.classify(fmt.Errorf("iceberg: ensure namespace %s: %w", joinIdent(level), err))
		}
		if ok {
			continue
		}
		err = retryBusy(ctx, func() error { return c.cat.CreateNamespace(ctx, level, nil) })
		if err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
			return c.classify(fmt.Errorf("iceberg: create namespace %s: %w", joinIdent(level), err))
		}
	}
	return nil
}

// NamespaceProperties returns ns's properties, without the catalog's
// internal "exists" marker. The error wraps ErrNoSuchNamespace if ns does
// not exist.
func (c *Catalog) NamespaceProperties(ctx context.Context, ns []string) (map[string]string, error) {
	if err := validateIdent(ns); err != nil {
		return nil, fmt.Errorf("iceberg: namespace properties %q: %w", ns, err)
	}
	props, err := c.cat.LoadNamespaceProperties(ctx, table.Identifier(slices.Clone(ns)))
	if err != nil {
		return nil, c.classify(fmt.Errorf("iceberg: namespace properties %s: %w", joinIdent(ns), err))
	}
	out := make(map[string]string, len(props))
	for k, v := range props {
		if k != "exists" {
			out[k] = v
		}
	}
	return out, nil
}

// SetNamespaceProperties inserts or overwrites the given keys; other keys
// are left as they are. The key "exists" is reserved.
func (c *Catalog) SetNamespaceProperties(ctx context.Context, ns []string, props map[string]string) error {
	if err := validateIdent(ns); err != nil {
		return fmt.Errorf("iceberg: set namespace properties %q: %w", ns, err)
	}
	if len(props) == 0 {
		return nil
	}
	// Setting the same keys again is harmless: SQLite's immediate
	// SQLITE_BUSY beside a concurrent commit is retried (retryBusy).
	err := retryBusy(ctx, func() error {
		_, err := c.cat.UpdateNamespaceProperties(ctx, table.Identifier(slices.Clone(ns)), nil, iceberggo.Properties(props))
		return err
	})
	if err != nil {
		return c.classify(fmt.Errorf("iceberg: set namespace properties %s: %w", joinIdent(ns), err))
	}
	return nil
}

// ListNamespaces returns every namespace of every level, sorted.
func (c *Catalog) ListNamespaces(ctx context.Context) ([][]string, error) {
	nss, err := c.cat.ListNamespaces(ctx, nil)
	if err != nil {
		return nil, c.classify(fmt.Errorf("iceberg: list namespaces: %w", err))
	}
	out := make([][]string, 0, len(nss))
	for _, ns := range nss {
		out = append(out, []string(ns))
	}
	if c.db == nil {
		// A REST catalog lists one level at a time (the spec's parent=):
		// walk down.
		for i := 0; i < len(out); i++ {
			kids, err := c.cat.ListNamespaces(ctx, table.Identifier(slices.Clone(out[i])))
			if err != nil {
				return nil, c.classify(fmt.Errorf("iceberg: list namespaces under %s: %w", joinIdent(out[i]), err))
			}
			for _, k := range kids {
				if len(k) > len(out[i]) && slices.Equal(k[:len(out[i])], out[i]) {
					out = append(out, []string(k))
				}
			}
		}
	}
	slices.SortFunc(out, slices.Compare)
	out = slices.CompactFunc(out, slices.Equal)
	return out, nil
}

// ListTables returns the full identifiers of the tables directly in ns,
// sorted. The error wraps ErrNoSuchNamespace if ns does not exist.
func (c *Catalog) ListTables(ctx context.Context, ns []string) ([][]string, error) {
	if err := validateIdent(ns); err != nil {
		return nil, fmt.Errorf("iceberg: list tables %q: %w", ns, err)
	}
	var out [][]string
	for ident, err := range c.cat.ListTables(ctx, table.Identifier(slices.Clone(ns))) {
		if err != nil {
			return nil, c.classify(fmt.Errorf("iceberg: list tables in %s: %w", joinIdent(ns), err))
		}
		out = append(out, []string(ident))
	}
	slices.SortFunc(out, slices.Compare)
	return out, nil
}

// TablesUnder is lake.TablesUnder.
func (c *Catalog) TablesUnder(ctx context.Context, prefix []string) ([][]string, error) {
	return lake.TablesUnder(ctx, c, prefix)
}

// TableSpec describes a table to create.
type TableSpec struct {
	// Schema is the table's columns. Field IDs are reassigned by the
	// catalog; identifier fields (NewSchemaWithIdentifiers) are kept.
	Schema *iceberggo.Schema
	// DayPartition, if set, partitions the table by day(<column>); the
	// column must be a date, timestamp or timestamptz column.
	DayPartition string
	// Properties are table properties. Unless set here, tidemark adds
	// defaultTableProps.
	Properties map[string]string
	// PlaceAs, if set, names the identifier whose directory the table's
	// files go to (lake.TableSpec.PlaceAs).
	PlaceAs []string
}

// tableLocation is where a table ident keeps its files: iceberg-go's
// default (<warehouse>/<ns>.db/<table>), spelled so that no level needs
// URL escaping (see dirName); of placeAs instead when it is set.
func (c *Catalog) tableLocation(ident, placeAs []string) (string, error) {
	if len(placeAs) > 0 {
		if err := validateTableIdent(placeAs); err != nil {
			return "", fmt.Errorf("place as %q: %w", placeAs, err)
		}
		ident = placeAs
	}
	return c.warehouseURL + "/" + dirName(joinIdent(ident[:len(ident)-1])) + ".db/" + dirName(ident[len(ident)-1]), nil
}

// defaultTableProps are added to every created table (CreateTable and
// CreateKeyedTable) unless the spec sets them:
//
//   - commit.retry.num-retries=4 (Java's default; iceberg-go's is 0), which
//     lets iceberg-go replay a commit that lost the catalog's
//     compare-and-swap without rewriting its data files. Table.Append
//     retries the races iceberg-go does not (see there).
//   - Parquet pages compressed with zstd at level 1 (klauspost's
//     SpeedFastest) rather than iceberg-go's default level (SpeedDefault,
//     the "double fast" matcher): on the benchmark's 1 KB rows of text and
//     jsonb, level 1 halved the CPU of writing a bucketed silver table
//     (30 -> 15.6 us a row) and its files came out 5% smaller (22.1 vs
//     23.3 MiB), not larger; the default level's encoder was the largest
//     single cost of a snapshot (30% of its CPU). Snappy was no faster and
//     its files were twice the size. Every Iceberg reader (PyIceberg, Spark,
//     Trino) reads zstd at any level; a table created earlier keeps its
//     properties.
//
// Dictionary encoding stays at iceberg-go's default (on, 2 MiB) for the
// tables that do not set it (bronze does): turning it off cost as much as
// it saved on unique columns and would give up the dictionary of
// low-cardinality ones.
var defaultTableProps = map[string]string{
	table.CommitNumRetriesKey:        "4",
	table.ParquetCompressionKey:      "zstd",
	table.ParquetCompressionLevelKey: "1",
}

// CreateTable creates the table ident (creating its namespace if needed)
// and returns it. If the table already exists the error wraps
// ErrTableExists and nothing is changed.
func (c *Catalog) CreateTable(ctx context.Context, ident []string, spec TableSpec) (*Table, error) {
	name := joinIdent(ident)
	if err := validateTableIdent(ident); err != nil {
		return nil, fmt.Errorf("iceberg: create table %q: %w", ident, err)
	}
	if spec.Schema == nil {
		return nil, fmt.Errorf("iceberg: create table %s: schema is nil", name)
	}
	if err := c.EnsureNamespace(ctx, ident[:len(ident)-1]); err != nil {
		return nil, fmt.Errorf("iceberg: create table %s: %w", name, err)
	}

	props := iceberggo.Properties{}
	for k, v := range defaultTableProps {
		props[k] = v
	}
	for k, v := range spec.Properties {
		props[k] = v
	}
	loc, err := c.tableLocation(ident, spec.PlaceAs)
	if err != nil {
		return nil, fmt.Errorf("iceberg: create table %s: %w", name, err)
	}
	opts := []catalog.CreateTableOpt{catalog.WithProperties(props), catalog.WithLocation(loc)}
	if spec.DayPartition != "" {
		ps, err := iceberggo.NewPartitionSpecOpts(iceberggo.AddPartitionFieldByName(
			spec.DayPartition, partitionFieldName(spec.DayPartition, "day"), iceberggo.DayTransform{}, spec.Schema, nil))
		if err != nil {
			return nil, fmt.Errorf("iceberg: create table %s: partition by day(%s): %w", name, spec.DayPartition, err)
		}
		opts = append(opts, catalog.WithPartitionSpec(&ps))
	}

	// SQLite can answer a concurrent writer SQLITE_BUSY at once (see
	// retryBusy): the row was not written, so creating again is safe.
	var tbl *table.Table
	err = retryBusy(ctx, func() (err error) {
		tbl, err = c.cat.CreateTable(ctx, table.Identifier(slices.Clone(ident)), spec.Schema, opts...)
		return err
	})
	if err != nil {
		return nil, c.classify(fmt.Errorf("iceberg: create table %s: %w", name, err))
	}
	return c.newTable(ident, tbl)
}

// LoadTable loads the table ident. If it does not exist the error wraps
// ErrNoSuchTable.
func (c *Catalog) LoadTable(ctx context.Context, ident []string) (*Table, error) {
	if err := validateTableIdent(ident); err != nil {
		return nil, fmt.Errorf("iceberg: load table %q: %w", ident, err)
	}
	tbl, err := c.cat.LoadTable(ctx, table.Identifier(slices.Clone(ident)))
	if err != nil {
		return nil, classify(fmt.Errorf("iceberg: load table %s: %w", joinIdent(ident), err), c.tableWhat(ctx, ident))
	}
	return c.newTable(ident, tbl)
}

func (c *Catalog) newTable(ident []string, tbl *table.Table) (*Table, error) {
	t := &Table{c: c, cat: c.cat, ident: slices.Clone(ident), name: joinIdent(ident)}
	if err := t.set(tbl); err != nil {
		return nil, fmt.Errorf("iceberg: table %s: %w", t.name, err)
	}
	return t, nil
}

func validateIdent(ident []string) error {
	if len(ident) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidIdentifier)
	}
	for _, level := range ident {
		if level == "" {
			return fmt.Errorf("%w: empty level", ErrInvalidIdentifier)
		}
		if strings.Contains(level, ".") {
			return fmt.Errorf("%w: level %q contains '.'", ErrInvalidIdentifier, level)
		}
	}
	return nil
}

func validateTableIdent(ident []string) error {
	if len(ident) < 2 {
		return fmt.Errorf("%w: a table identifier needs a namespace and a name", ErrInvalidIdentifier)
	}
	return validateIdent(ident)
}

func joinIdent(ident []string) string { return strings.Join(ident, ".") }

// dirName returns name if it needs no URL escaping, else name with every
// rune outside [A-Za-z0-9._-] replaced by '_' and a hash of name appended,
// so that distinct names keep distinct directories.
//
// iceberg-go builds table locations with url.JoinPath, which writes
// "Order Items" as "Order%20Items" in the metadata; PyIceberg does not
// decode that and looks for a directory literally named "Order%20Items".
// Source tables can have any name, so tidemark chooses the directory.
func dirName(name string) string {
	if (&url.URL{Path: name}).EscapedPath() == name && !strings.Contains(name, "/") {
		return name
	}
	safe := strings.Map(func(r rune) rune {
		if r < utf8.RuneSelf && (r == '.' || r == '_' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return r
		}
		return '_'
	}, name)
	sum := sha256.Sum256([]byte(name))
	return safe + "-" + hex.EncodeToString(sum[:4])
}

// partitionFieldName names the partition field of transform (day, bucket)
// of column col: "<col>_<transform>", spelled as an Avro name.
//
// Manifests are Avro files whose partition struct has one field per
// partition field, and Avro names are [A-Za-z_][A-Za-z0-9_]*: iceberg-go
// fails to write a manifest for "k ey_bucket" or "ключ_bucket". Like
// Iceberg Java's AvroSchemaUtil.makeCompatibleName, every other character
// becomes "_x" and its upper-case hex code point, and a leading digit gets
// a '_' in front; a name that is already valid is kept, so existing tables
// do not change.
func partitionFieldName(col, transform string) string {
	name := col + "_" + transform
	var b strings.Builder
	for i, r := range name {
		switch {
		case r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z':
			b.WriteRune(r)
		case r >= '0' && r <= '9':
			if i == 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
		default:
			fmt.Fprintf(&b, "_x%X", r)
		}
	}
	return b.String()
}

// redact replaces every secret in err's message (pgx can echo a connection
// string's password, pgx#1271); errors.Is/As still see the chain.
func redact(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
