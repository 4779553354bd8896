package iceberg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"syscall"

	"github.com/apache/iceberg-go/table"

	"github.com/tidemark/tidemark/internal/fault"
)

// SQLite result codes (the low byte of an extended code) that mean the
// catalog file itself is damaged, or the disk under it is full.
const (
	sqliteCorrupt = 11 // SQLITE_CORRUPT: "database disk image is malformed"
	sqliteFull    = 13 // SQLITE_FULL: "database or disk is full"
	sqliteNotADB  = 26 // SQLITE_NOTADB: "file is not a database"
)

// sqliteCode returns the primary SQLite result code in err's chain (the
// modernc and mattn drivers both expose Code() int), or 0.
func sqliteCode(err error) int {
	var ce interface{ Code() int }
	if errors.As(err, &ce) {
		return ce.Code() & 0xff
	}
	return 0
}

// isCorrupt reports whether err says that the lake's own state cannot be
// read: a metadata, manifest or data file that the catalog references is
// missing, truncated or not what it should be, or the SQLite catalog file is
// damaged. Retrying cannot fix any of these, and writing over them would
// destroy what an operator needs to recover.
func isCorrupt(err error) bool {
	if err == nil {
		return false
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn), errors.As(err, &typ):
		return true
	case errors.Is(err, table.ErrInvalidMetadata), errors.Is(err, table.ErrInvalidMetadataFormatVersion):
		return true
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	switch sqliteCode(err) {
	case sqliteCorrupt, sqliteNotADB:
		return true
	}
	return false
}

// isDiskFull reports whether err is the file system or SQLite saying there
// is no space left: transient, it ends when space is freed.
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || sqliteCode(err) == sqliteFull
}

// classify marks err as fault.ErrCorruptState when the lake's state is
// unreadable (what names the object: a table and its metadata file, the
// catalog file), and as transient when the disk is full. Other errors are
// returned as they are.
func classify(err error, what string) error {
	err = neutral(err)
	switch {
	case err == nil:
		return nil
	case isCorrupt(err):
		return fault.With(fault.ErrCorruptState, fmt.Sprintf(
			"%s cannot be read: the lake's state is damaged. tidemark stops without writing to it and without moving the source position; "+
				"restore the file from a backup (or re-snapshot into a fresh pipeline: new --name)", what), err)
	case isDiskFull(err):
		return fault.MarkTransient(err)
	}
	return err
}

// metadataLocation returns the metadata file the catalog names for ident,
// or "" if it cannot tell (for error messages only).
func (c *Catalog) metadataLocation(ctx context.Context, ident []string) string {
	q := `SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?`
	if c.postgres {
		q = `SELECT metadata_location FROM iceberg_tables WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3`
	}
	if c.db == nil {
		return "" // a REST catalog: its errors name the table
	}
	var loc string
	err := c.db.QueryRowContext(ctx, q, CatalogName, joinIdent(ident[:len(ident)-1]), ident[len(ident)-1]).Scan(&loc)
	if err != nil {
		return ""
	}
	return loc
}

// tableWhat names a table and its metadata file for classify.
func (c *Catalog) tableWhat(ctx context.Context, ident []string) string {
	if loc := c.metadataLocation(ctx, ident); loc != "" {
		return fmt.Sprintf("table %s (metadata file %s)", joinIdent(ident), loc)
	}
	return "table " + joinIdent(ident)
}

// classify is classify for errors of the catalog itself (its file).
func (c *Catalog) classify(err error) error { return classify(err, "catalog "+c.where) }
