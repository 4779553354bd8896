package gold

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	duckdb "github.com/duckdb/duckdb-go/v2"
)

// This file is gold's SQL engine: an embedded, in-memory DuckDB per
// refresh. It never reads the lake itself (its Iceberg extension cannot be
// downloaded here, and would bypass tidemark's reads): each silver table a
// query names is streamed, live rows only, into a Parquet file in the
// refresh's own directory, and appears to DuckDB as the view
// silver.<schema>.<table> over read_parquet of that file. The result is
// written by DuckDB to a Parquet file too, cast to the types gold stores
// (MapType), and read back as Arrow batches. Parquet files rather than
// DuckDB's Arrow views: those need the duckdb_arrow build tag on every
// build and test of the module, and have known bugs with projections
// (DEPENDENCIES.md); the files cost a write and a read of each silver
// table, bounded in memory on both sides.

// EngineOptions bound one DuckDB session.
type EngineOptions struct {
	// Dir is the session's directory: its input and result files, and
	// DuckDB's spill files. It must exist; the caller removes it.
	Dir string
	// MemoryLimit is DuckDB's memory_limit in bytes (it spills to Dir
	// beyond it).
	MemoryLimit int64
	// Threads is DuckDB's thread count (default 1).
	Threads int
}

// engine is one DuckDB session.
type engine struct {
	db   *sql.DB
	conn *sql.Conn
	dir  string
}

// openEngine starts an in-memory DuckDB with extensions neither installed
// nor loaded on demand (there is no network, and a query must not reach
// one), bounded in memory and threads, reading files only in opts.Dir.
func openEngine(ctx context.Context, opts EngineOptions) (*engine, error) {
	threads := max(opts.Threads, 1)
	limit := max(opts.MemoryLimit>>20, 16)
	q := url.Values{}
	q.Set("autoinstall_known_extensions", "false")
	q.Set("autoload_known_extensions", "false")
	q.Set("threads", strconv.Itoa(threads))
	q.Set("memory_limit", fmt.Sprintf("%dMiB", limit))
	q.Set("temp_directory", filepath.Join(opts.Dir, "spill"))
	c, err := duckdb.NewConnector("?"+q.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("start DuckDB: %w", err)
	}
	db := sql.OpenDB(c)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("start DuckDB: %w", err)
	}
	e := &engine{db: db, conn: conn, dir: opts.Dir}
	// Only the session's directory may be read or written from SQL.
	for _, s := range []string{
		"SET allowed_directories = [" + literal(opts.Dir+string(os.PathSeparator)) + "]",
		"SET enable_external_access = false",
		"SET lock_configuration = true",
		"ATTACH ':memory:' AS silver",
	} {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			e.close()
			return nil, fmt.Errorf("start DuckDB: %s: %w", s, err)
		}
	}
	return e, nil
}

func (e *engine) close() {
	e.conn.Close()
	e.db.Close()
}

// ident quotes a DuckDB identifier.
func ident(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// literal quotes a DuckDB string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// TableRef is a silver table a query names.
type TableRef struct{ Schema, Table string }

func (r TableRef) String() string { return "silver." + r.Schema + "." + r.Table }

// references returns the silver tables query reads, checking that it is
// one SELECT statement and that every table it names is
// silver.<schema>.<table>.
func (e *engine) references(ctx context.Context, query string) ([]TableRef, error) {
	var n sql.NullInt64
	var serr sql.NullString
	if err := e.conn.QueryRowContext(ctx, "SELECT json_extract_string(j, '$.error_message'), json_array_length(json_extract(j, '$.statements')) FROM (SELECT json_serialize_sql($1::VARCHAR) AS j)", query).Scan(&serr, &n); err != nil {
		return nil, err
	}
	if serr.Valid && serr.String != "" {
		if strings.Contains(serr.String, "Only SELECT") {
			return nil, errors.New("the sql must be one SELECT statement (or WITH ... SELECT): " + serr.String)
		}
		return nil, errors.New(serr.String)
	}
	if n.Int64 != 1 {
		return nil, fmt.Errorf("the sql must be one SELECT statement, got %d statements", n.Int64)
	}
	names, err := duckdb.GetTableNames(e.conn, query, true)
	if err != nil {
		return nil, err
	}
	var refs []TableRef
	seen := map[TableRef]bool{}
	for _, name := range names {
		parts := splitName(name)
		if len(parts) != 3 || !strings.EqualFold(parts[0], "silver") {
			return nil, fmt.Errorf("%s is not a silver table: name silver tables as silver.<schema>.<table> (e.g. silver.public.orders)", name)
		}
		r := TableRef{Schema: parts[1], Table: parts[2]}
		if !seen[r] {
			seen[r] = true
			refs = append(refs, r)
		}
	}
	return refs, nil
}

// splitName splits a qualified name as GetTableNames prints it
// (silver."Pub.x".t AS alias) into its parts, unquoted.
func splitName(s string) []string {
	var parts []string
	var cur strings.Builder
	quoted := false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '"' && quoted && i+1 < len(s) && s[i+1] == '"':
			cur.WriteByte('"')
			i++
		case ch == '"':
			quoted = !quoted
		case ch == '.' && !quoted:
			parts = append(parts, cur.String())
			cur.Reset()
		case ch == ' ' && !quoted: // " AS alias"
			parts = append(parts, cur.String())
			return parts
		default:
			cur.WriteByte(ch)
		}
	}
	return append(parts, cur.String())
}

// view makes the Parquet file path the table silver.<r.Schema>.<r.Table>.
func (e *engine) view(ctx context.Context, r TableRef, path string) error {
	for _, s := range []string{
		"CREATE SCHEMA IF NOT EXISTS silver." + ident(r.Schema),
		"CREATE OR REPLACE VIEW silver." + ident(r.Schema) + "." + ident(r.Table) + " AS SELECT * FROM read_parquet(" + literal(path) + ")",
	} {
		if _, err := e.conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("make %s readable to DuckDB: %w", r, err)
		}
	}
	return nil
}

// describe returns the columns of query's result, mapped to the types gold
// stores; the error names the first column gold cannot store, or says why
// DuckDB rejects the query.
func (e *engine) describe(ctx context.Context, query string) ([]Column, error) {
	rows, err := e.conn.QueryContext(ctx, "DESCRIBE "+query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []Column
	seen := map[string]bool{}
	for rows.Next() {
		var name, typ string
		var null, key, def, extra sql.NullString
		if err := rows.Scan(&name, &typ, &null, &key, &def, &extra); err != nil {
			return nil, err
		}
		if seen[strings.ToLower(name)] {
			return nil, fmt.Errorf("the result has two columns named %q: give each its own name (AS ...)", name)
		}
		seen[strings.ToLower(name)] = true
		if strings.Contains(name, ".") || strings.TrimSpace(name) == "" {
			// Readers take a dot in a column name for a nested field.
			return nil, fmt.Errorf("the result column %q needs a name without dots: alias it (AS name)", name)
		}
		c, err := MapType(name, typ)
		if err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return nil, errors.New("the query returns no columns")
	}
	return cols, nil
}

// run computes query into a Parquet file of the session, each column cast
// to what gold stores, and returns the file's path.
func (e *engine) run(ctx context.Context, query string, cols []Column) (string, error) {
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = "CAST(q." + ident(c.Name) + " AS " + c.Cast + ") AS " + ident(c.Name)
	}
	out := filepath.Join(e.dir, "result.parquet")
	stmt := "COPY (SELECT " + strings.Join(sel, ", ") + " FROM (" + query + "\n) AS q) TO " + literal(out) + " (FORMAT parquet)"
	if _, err := e.conn.ExecContext(ctx, stmt); err != nil {
		return "", err
	}
	return out, nil
}

// writeParquet returns a Parquet writer of schema sc at path; closing it
// closes the file.
func writeParquet(path string, sc *arrow.Schema) (*pqarrow.FileWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w, err := pqarrow.NewFileWriter(sc, f,
		parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy), parquet.WithMaxRowGroupLength(64*1024)),
		pqarrow.DefaultWriterProps())
	if err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// readResult reads the result file at path as batches of schema sc (the
// gold table's columns, by name), holding at most maxBytes of them.
func readResult(ctx context.Context, path string, sc *arrow.Schema, maxBytes int64) ([]arrow.RecordBatch, int64, error) {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return nil, 0, err
	}
	defer pf.Close()
	mem := memory.DefaultAllocator
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64 * 1024}, mem)
	if err != nil {
		return nil, 0, err
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return nil, 0, err
	}
	defer rr.Release()
	var out []arrow.RecordBatch
	release := func() {
		for _, r := range out {
			r.Release()
		}
	}
	var rows, size int64
	for rr.Next() {
		rec := rr.RecordBatch()
		cols := make([]arrow.Array, sc.NumFields())
		for i, f := range sc.Fields() {
			idx := rec.Schema().FieldIndices(f.Name)
			if len(idx) != 1 {
				release()
				return nil, 0, fmt.Errorf("the result has no column %q", f.Name)
			}
			a := rec.Column(idx[0])
			if arrow.TypeEqual(a.DataType(), f.Type) {
				a.Retain()
			} else {
				c, err := compute.CastArray(ctx, a, compute.SafeCastOptions(f.Type))
				if err != nil {
					release()
					return nil, 0, fmt.Errorf("result column %q: read %s as %s: %w", f.Name, a.DataType(), f.Type, err)
				}
				a = c
			}
			cols[i] = a
			size += int64(arrowSize(a))
		}
		b := array.NewRecordBatch(sc, cols, rec.NumRows())
		for _, c := range cols {
			c.Release()
		}
		out = append(out, b)
		rows += rec.NumRows()
		if maxBytes > 0 && size > maxBytes {
			release()
			return nil, 0, fmt.Errorf("the result holds more than %d MiB after %d rows, more than gold's share of memory_budget: aggregate further, or raise memory_budget", maxBytes>>20, rows)
		}
	}
	if err := rr.Err(); err != nil {
		release()
		return nil, 0, err
	}
	return out, rows, nil
}

func arrowSize(a arrow.Array) int {
	n := 0
	for _, b := range a.Data().Buffers() {
		if b != nil {
			n += b.Len()
		}
	}
	return n
}
