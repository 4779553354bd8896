package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode"

	"github.com/apache/iceberg-go"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
)

// reservedPrefix starts every tidemark metadata column (cdc_op, cdc_ts,
// ..., silver's cdc_deleted); silver tells source columns from metadata by
// it, so a source column may not start with it, in any case (engines such
// as Spark, Trino and DuckDB match column names case-insensitively).
const reservedPrefix = "cdc_"

// IsReservedColumn reports whether name collides with a tidemark metadata
// column: it starts with "cdc_", in any case.
func IsReservedColumn(name string) bool {
	return len(name) >= len(reservedPrefix) && strings.EqualFold(name[:len(reservedPrefix)], reservedPrefix)
}

// columnCollision is the error for a source column named like a metadata
// column. refused says the table is left out on its own (found when the
// table is described); otherwise the column appeared on a captured table.
func columnCollision(t change.TableID, col string, refused bool) error {
	return fault.With(fault.ErrColumnCollision, fmt.Sprintf("table %s: column %q starts with %q, which tidemark reserves for its metadata columns%s",
		showTable(t), col, reservedPrefix, collisionFix(t, refused, fmt.Sprintf("(ALTER TABLE %s RENAME COLUMN %s TO ...)", showTable(t), quoteIdent(col)))), nil)
}

// collisionFix ends a column_collision message: how to rename (rename is
// the statement), and, for a captured table, how to leave it out.
func collisionFix(t change.TableID, refused bool, rename string) string {
	if refused {
		return ", so the table is not captured; rename it at the source " + rename
	}
	return "; rename it at the source " + rename + " or " + leaveOut(t)
}

// elementCollision refuses a column named "<c>.element" when c is an array
// column: Iceberg names a list's element field "<c>.element", and a schema
// with two fields of one full name is invalid (readers index fields by it).
// refused is columnCollision's.
func elementCollision(t change.TableID, cols []string, isList func(string) bool, refused bool) error {
	have := map[string]bool{}
	for _, c := range cols {
		have[c] = true
	}
	for _, c := range cols {
		if isList(c) && have[c+".element"] {
			return fault.With(fault.ErrColumnCollision, fmt.Sprintf("table %s: column %q has the name Iceberg gives to the elements of the array column %q%s",
				showTable(t), c+".element", c, collisionFix(t, refused, "(ALTER TABLE ... RENAME COLUMN ...) one of them")), nil)
		}
	}
	return nil
}

// leaveOut tells the operator how to exclude table t from the pipeline.
func leaveOut(t change.TableID) string {
	return fmt.Sprintf("leave the table out: list the tables to capture in tables: (--tables) when tidemark creates the publication, or, for a table-list publication you manage, ALTER PUBLICATION ... DROP TABLE %s "+
		"(a FOR ALL TABLES publication cannot leave a table out: use one with a table list, --publication)", showTable(t))
}

// showTable is quoteTable for messages: a name with a control character
// (a newline would split a log line) is shown Go-quoted instead.
func showTable(t change.TableID) string {
	if strings.IndexFunc(t.Schema+t.Name, unicode.IsControl) >= 0 {
		return fmt.Sprintf("%q.%q", t.Schema, t.Name)
	}
	return quoteTable(t)
}

// checkTableName refuses a schema or table name the lake cannot hold
// exactly (config.LakeNameProblem), before anything is created for it.
func checkTableName(t change.TableID) error {
	for _, part := range [][2]string{{"schema", t.Schema}, {"table", t.Name}} {
		if why := config.LakeNameProblem(part[0], part[1]); why != "" {
			return refuse(fault.With(fault.ErrUnsupportedName, fmt.Sprintf("table %s: the %s name %q %s, so the table is not captured; rename it at the source (ALTER TABLE %s RENAME TO ...)",
				showTable(t), part[0], part[1], why, showTable(t)), nil))
		}
	}
	return nil
}

// Dialer opens connections to the source with tidemark's session settings.
type Dialer struct {
	cfg *pgx.ConnConfig
}

// NewDialer parses dsn. The error never contains the password.
func NewDialer(dsn string, redact func(string) string) (*Dialer, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fault.With(fault.ErrBadConfig, "source: cannot parse the PostgreSQL connection string "+redact(dsn)+
			" (expected postgres://user:password@host:port/database)", errors.New(redact(err.Error())))
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	for k, v := range typemap.SessionSettings() {
		cfg.RuntimeParams[k] = v
	}
	cfg.RuntimeParams["application_name"] = "tidemark"
	return &Dialer{cfg: cfg}, nil
}

// User is the role tidemark connects as.
func (d *Dialer) User() string { return d.cfg.User }

// Database is the database name of the source.
func (d *Dialer) Database() string { return d.cfg.Database }

// Connect opens an ordinary SQL connection.
func (d *Dialer) Connect(ctx context.Context) (*pgx.Conn, error) {
	c, err := pgx.ConnectConfig(ctx, d.cfg.Copy())
	if err != nil {
		if isPermissionDenied(err) {
			return nil, fault.With(fault.ErrPermissionDenied, fmt.Sprintf(
				"role %q may not connect to database %q: grant it (GRANT CONNECT ON DATABASE %s TO %s), then rerun",
				d.cfg.User, d.cfg.Database, quoteIdent(d.cfg.Database), quoteIdent(d.cfg.User)), err)
		}
		return nil, classify(fmt.Errorf("connect to source %s:%d/%s: %w", d.cfg.Host, d.cfg.Port, d.cfg.Database, err))
	}
	return c, nil
}

// ConnectReplication opens a logical replication connection.
func (d *Dialer) ConnectReplication(ctx context.Context) (*pgconn.PgConn, error) {
	pc := d.cfg.Config.Copy()
	pc.RuntimeParams["replication"] = "database"
	c, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, classify(fmt.Errorf("open replication connection to %s:%d/%s: %w", d.cfg.Host, d.cfg.Port, d.cfg.Database, err))
	}
	return c, nil
}

// classify marks well-known server answers with their fault class.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return err
	}
	if tlsErr := classifyTLS(err); tlsErr != nil {
		return tlsErr
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42501":
			return fault.With(fault.ErrPermissionDenied, "permission denied on the source: grant the tidemark role what docs/operations.md, Minimal grants, lists (LOGIN REPLICATION, SELECT on the published tables, a publication created beforehand)", err)
		case "28P01", "28000":
			return fault.With(fault.ErrBadConfig, "the source rejected the credentials: check the user and password in --source", err)
		case "3D000":
			return fault.With(fault.ErrBadConfig, "the source database does not exist: check the database in --source", err)
		}
	}
	if isTransient(err) {
		return fault.MarkTransient(err)
	}
	return err
}

// classifyTLS names a failed verification of the server's certificate
// (sslmode=verify-ca / verify-full): a configuration error, not a network
// blip to retry. It returns nil for any other error.
func classifyTLS(err error) error {
	var host x509.HostnameError
	var authority x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &host):
		return fault.With(fault.ErrBadConfig, fmt.Sprintf(
			"TLS: the source server's certificate does not match host %s (sslmode=verify-full): connect with a host name the certificate "+
				"was issued for, or reissue the certificate with this name; do not lower sslmode to silence this", host.Host), err)
	case errors.As(err, &authority):
		return fault.With(fault.ErrBadConfig,
			"TLS: the source server's certificate is not signed by a CA in sslrootcert (sslmode=verify-ca/verify-full): "+
				"point sslrootcert at the CA that issued the server certificate", err)
	case errors.As(err, &invalid):
		return fault.With(fault.ErrBadConfig, "TLS: the source server's certificate is not valid (expired, or not for server use)", err)
	}
	var verr *tls.CertificateVerificationError
	if errors.As(err, &verr) {
		return fault.With(fault.ErrBadConfig, "TLS: the source server's certificate could not be verified", err)
	}
	return nil
}

// TypeCache answers typemap lookups from pg_type, caching by OID. Safe for
// concurrent use; it uses its own connection lazily.
type TypeCache struct {
	mu    sync.Mutex
	d     *Dialer
	conn  *pgx.Conn
	cache map[uint32]typemap.TypeInfo
}

// NewTypeCache returns a cache that connects through d when it must.
func NewTypeCache(d *Dialer) *TypeCache {
	return &TypeCache{d: d, cache: map[uint32]typemap.TypeInfo{}}
}

// Close releases the cache's connection.
func (tc *TypeCache) Close() {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.conn != nil {
		tc.conn.Close(context.Background())
		tc.conn = nil
	}
}

// Lookup implements typemap.Lookup.
func (tc *TypeCache) Lookup(oid uint32) (typemap.TypeInfo, error) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if ti, ok := tc.cache[oid]; ok {
		return ti, nil
	}
	ctx := context.Background()
	if tc.conn == nil || tc.conn.IsClosed() {
		c, err := tc.d.Connect(ctx)
		if err != nil {
			return typemap.TypeInfo{}, err
		}
		tc.conn = c
	}
	var (
		ti       typemap.TypeInfo
		kind     string
		category string
		delim    string
		elem     uint32
	)
	err := tc.conn.QueryRow(ctx, `SELECT t.oid, format_type(t.oid, NULL), t.typtype::text, t.typbasetype, t.typelem, t.typdelim::text, t.typtypmod, t.typcategory::text
		FROM pg_type t WHERE t.oid = $1`, oid).Scan(&ti.OID, &ti.Name, &kind, &ti.BaseOID, &elem, &delim, &ti.TypMod, &category)
	if err != nil {
		tc.conn.Close(ctx)
		tc.conn = nil
		return ti, classify(fmt.Errorf("look up type oid %d: %w", oid, err))
	}
	if kind != "" {
		ti.Kind = kind[0]
	}
	if category == "A" {
		ti.ElemOID = elem
	}
	if delim != "" {
		ti.Delim = delim[0]
	}
	tc.cache[oid] = ti
	return ti, nil
}

// TableInfo is what the catalog says about a published table.
type TableInfo struct {
	Relation *Relation
	Estimate int64 // pg_class.reltuples (may be -1 when never analyzed)
	// Keyless is why the table has no key to merge by (a
	// fault.ErrNoPrimaryKey with its fixes), nil for a keyed table: it
	// is captured into bronze only (keyless.go).
	Keyless error
	// IdentKey: the table is keyed by its primary key or replica identity
	// index (not a declared merge key, not the whole row), so it follows a
	// change of that key (rekey.go).
	IdentKey bool
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

func quoteTable(t change.TableID) string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

// describeTable reads a table's columns and key from the catalog.
func describeTable(ctx context.Context, conn *pgx.Conn, t change.TableID, lookup typemap.Lookup) (*TableInfo, error) {
	return describeKeyed(ctx, conn, t, lookup, typemap.Options{}, nil)
}

// describeKeyed is describeTable for a table with a declared merge key
// (nil: none), keyed by chooseKey, its columns mapped by o.
func describeKeyed(ctx context.Context, conn *pgx.Conn, t change.TableID, lookup typemap.Lookup, o typemap.Options, declared []string) (*TableInfo, error) {
	if err := checkTableName(t); err != nil {
		return nil, err
	}
	var (
		oid      uint32
		replid   string
		estimate float64
	)
	// reltuples is -1 until the table is analyzed; n_live_tup is kept by
	// the statistics collector without ANALYZE. Either is an estimate. A
	// partitioned table holds no rows itself: its estimate is its leaf
	// partitions'.
	err := conn.QueryRow(ctx, `SELECT c.oid, c.relreplident::text, CASE WHEN c.relkind = 'p' THEN
			(SELECT coalesce(sum(GREATEST(lc.reltuples, coalesce(ls.n_live_tup, -1), 0)), 0)
			 FROM pg_partition_tree(c.oid) pt JOIN pg_class lc ON lc.oid = pt.relid LEFT JOIN pg_stat_user_tables ls ON ls.relid = lc.oid
			 WHERE pt.isleaf)
			ELSE GREATEST(c.reltuples, coalesce(s.n_live_tup, -1)) END::float8
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&oid, &replid, &estimate)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("table %s: not found in the source catalog", t)
		}
		return nil, classify(fmt.Errorf("table %s: read catalog: %w", t, err))
	}
	rows, err := conn.Query(ctx, `SELECT a.attname, a.atttypid, a.atttypmod, format_type(a.atttypid, a.atttypmod), a.attnotnull, `+orderableSQL+`, a.attnum
		FROM pg_attribute a JOIN pg_type ty ON ty.oid = a.atttypid
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, oid)
	if err != nil {
		return nil, classify(fmt.Errorf("table %s: read columns: %w", t, err))
	}
	rel := &Relation{Table: t}
	for rows.Next() {
		var c Column
		if err := rows.Scan(&c.Name, &c.TypeOID, &c.TypeMod, &c.TypeName, &c.NotNull, &c.Orderable, &c.AttNum); err != nil {
			rows.Close()
			return nil, classify(fmt.Errorf("table %s: read columns: %w", t, err))
		}
		rel.Columns = append(rel.Columns, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, classify(fmt.Errorf("table %s: read columns: %w", t, err))
	}
	// A column name the lake cannot hold refuses this table only: the
	// others run, and status names it with the fix.
	for _, c := range rel.Columns {
		if IsReservedColumn(c.Name) {
			return nil, refuse(columnCollision(t, c.Name, true))
		}
	}
	if err := mapColumns(t, rel.Columns, lookup, o); err != nil {
		return nil, err
	}
	names := make([]string, len(rel.Columns))
	lists := map[string]bool{}
	for i, c := range rel.Columns {
		names[i] = c.Name
		_, lists[c.Name] = c.Map.IcebergType().(*iceberg.ListType)
	}
	if err := elementCollision(t, names, func(c string) bool { return lists[c] }, true); err != nil {
		return nil, refuse(err)
	}
	keys, err := tableKey(ctx, conn, oid, replid)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", t, err)
	}
	identKey := len(declared) == 0 && len(keys) > 0 && replid != "n"
	var keyless error
	var kl *keylessTable
	if keys, err = chooseKey(t, rel, replid, keys, declared); errors.As(err, &kl) {
		keys, keyless = nil, kl.err
	} else if err != nil {
		return nil, err
	}
	rel.setKeys(keys)
	return &TableInfo{Relation: rel, Estimate: int64(estimate), Keyless: keyless, IdentKey: identKey}, nil
}

// tableKey returns the replica identity index columns when one is set, else
// the primary key columns.
func tableKey(ctx context.Context, conn *pgx.Conn, oid uint32, replid string) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT i.indisprimary, i.indisreplident,
			ARRAY(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
			      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.ord)
		FROM pg_index i WHERE i.indrelid = $1 AND (i.indisprimary OR i.indisreplident)`, oid)
	if err != nil {
		return nil, classify(fmt.Errorf("read key: %w", err))
	}
	defer rows.Close()
	var pk, ri []string
	for rows.Next() {
		var isPK, isRI bool
		var cols []string
		if err := rows.Scan(&isPK, &isRI, &cols); err != nil {
			return nil, classify(fmt.Errorf("read key: %w", err))
		}
		if isPK {
			pk = cols
		}
		if isRI {
			ri = cols
		}
	}
	if err := rows.Err(); err != nil {
		return nil, classify(fmt.Errorf("read key: %w", err))
	}
	if replid == "i" && len(ri) > 0 {
		return ri, nil
	}
	return pk, nil
}

// publicationTables lists the tables in the publication.
func publicationTables(ctx context.Context, conn *pgx.Conn, pub string) ([]change.TableID, error) {
	rows, err := conn.Query(ctx, `SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1 ORDER BY 1, 2`, pub)
	if err != nil {
		return nil, classify(fmt.Errorf("list tables of publication %q: %w", pub, err))
	}
	defer rows.Close()
	var out []change.TableID
	for rows.Next() {
		var t change.TableID
		if err := rows.Scan(&t.Schema, &t.Name); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, classify(rows.Err())
}

// unreadableTables lists the publication's tables that the session's role
// may not SELECT.
func unreadableTables(ctx context.Context, conn *pgx.Conn, pub string) ([]change.TableID, error) {
	// By OID: has_table_privilege(oid) is NULL, not an error, for a table
	// dropped meanwhile.
	rows, err := conn.Query(ctx, `SELECT p.schemaname::text, p.tablename::text FROM pg_publication_tables p
		JOIN pg_namespace n ON n.nspname = p.schemaname JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.tablename
		WHERE p.pubname = $1 AND NOT has_table_privilege(c.oid, 'SELECT') ORDER BY 1, 2`, pub)
	if err != nil {
		return nil, classify(fmt.Errorf("check SELECT privilege on the tables of publication %q: %w", pub, err))
	}
	defer rows.Close()
	var out []change.TableID
	for rows.Next() {
		var t change.TableID
		if err := rows.Scan(&t.Schema, &t.Name); err != nil {
			return nil, classify(err)
		}
		out = append(out, t)
	}
	return out, classify(rows.Err())
}

// publicationExists reports whether the publication exists.
func publicationExists(ctx context.Context, conn *pgx.Conn, pub string) (bool, error) {
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_publication WHERE pubname = $1`, pub).Scan(&n); err != nil {
		return false, classify(fmt.Errorf("look up publication %q: %w", pub, err))
	}
	return n > 0, nil
}

// createPublication creates pub for the listed tables, or FOR ALL TABLES
// when none are listed.
func createPublication(ctx context.Context, conn *pgx.Conn, pub string, tables []change.TableID) error {
	sql := "CREATE PUBLICATION " + quoteIdent(pub)
	if len(tables) == 0 {
		sql += " FOR ALL TABLES"
	} else {
		parts := make([]string, len(tables))
		for i, t := range tables {
			parts[i] = quoteTable(t)
		}
		sql += " FOR TABLE " + strings.Join(parts, ", ")
	}
	// A partitioned table is published (and captured) as its root: one
	// lake table, not one per leaf partition (partition.go).
	sql += " WITH (publish_via_partition_root = true)"
	if _, err := conn.Exec(ctx, sql); err != nil {
		if isPermissionDenied(err) {
			need := "FOR ALL TABLES needs a superuser"
			if len(tables) > 0 {
				need = "FOR TABLE needs CREATE on the database and ownership of the tables"
			}
			return fault.With(fault.ErrPermissionDenied, fmt.Sprintf(
				"the source role may not create publication %q (%s): create it beforehand as a superuser or the tables' owner "+
					"(CREATE PUBLICATION %s FOR TABLE ...), see docs/operations.md, Minimal grants", pub, need, quoteIdent(pub)), err)
		}
		return classify(fmt.Errorf("create publication %q: %w", pub, err))
	}
	return nil
}

func isPermissionDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// addToPublication adds tables missing from a table-list publication.
func addToPublication(ctx context.Context, conn *pgx.Conn, pub string, have, want []change.TableID) error {
	in := map[change.TableID]bool{}
	for _, t := range have {
		in[t] = true
	}
	for _, t := range want {
		if in[t] {
			continue
		}
		if _, err := conn.Exec(ctx, "ALTER PUBLICATION "+quoteIdent(pub)+" ADD TABLE "+quoteTable(t)); err != nil {
			if isPermissionDenied(err) {
				return fault.With(fault.ErrPermissionDenied, fmt.Sprintf(
					"the source role may not add table %s to publication %q (that needs ownership of both): add it as their owner "+
						"(ALTER PUBLICATION %s ADD TABLE %s), or leave it out of --tables", t, pub, quoteIdent(pub), quoteTable(t)), err)
			}
			return classify(fmt.Errorf("add table %s to publication %q: %w", t, pub, err))
		}
	}
	return nil
}

// SlotInfo is a replication slot's state.
type SlotInfo struct {
	Exists         bool
	Plugin         string
	Database       string
	WALStatus      string
	ConfirmedFlush uint64
	RestartLSN     uint64
	ActivePID      int32
}

func slotInfo(ctx context.Context, conn *pgx.Conn, slot string) (SlotInfo, error) {
	var (
		si                    SlotInfo
		plugin, db, walStatus *string
		confirmed, restart    *string
		pid                   *int32
	)
	err := conn.QueryRow(ctx, `SELECT plugin::text, database::text, wal_status, confirmed_flush_lsn::text, restart_lsn::text, active_pid
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&plugin, &db, &walStatus, &confirmed, &restart, &pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return si, nil
	}
	if err != nil {
		return si, classify(fmt.Errorf("look up replication slot %q: %w", slot, err))
	}
	si.Exists = true
	if plugin != nil {
		si.Plugin = *plugin
	}
	if db != nil {
		si.Database = *db
	}
	if walStatus != nil {
		si.WALStatus = *walStatus
	}
	if confirmed != nil {
		si.ConfirmedFlush, _ = ParseLSN(*confirmed)
	}
	if restart != nil {
		si.RestartLSN, _ = ParseLSN(*restart)
	}
	if pid != nil {
		si.ActivePID = *pid
	}
	return si, nil
}

// ParseLSN parses "X/Y".
func ParseLSN(s string) (uint64, error) {
	var hi, lo uint32
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		return 0, fmt.Errorf("parse LSN %q: %w", s, err)
	}
	return uint64(hi)<<32 | uint64(lo), nil
}

// FormatLSN prints an LSN as PostgreSQL does.
func FormatLSN(l uint64) string { return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l)) }

// currentWALLSN returns pg_current_wal_lsn().
func currentWALLSN(ctx context.Context, conn *pgx.Conn) (uint64, error) {
	var s string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, classify(fmt.Errorf("read current WAL position: %w", err))
	}
	return ParseLSN(s)
}
