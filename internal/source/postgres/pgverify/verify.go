package pgverify

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
	"github.com/tidemark/tidemark/internal/verify"
)

// This file reads the source: a table's columns and key, consistent
// snapshots with the WAL position they cover, chunk hashes (in SQL, or in
// Go when SQL cannot compute them), and rows by key. Every value is read in
// PostgreSQL's text format under typemap.SessionSettings (the Dialer sets
// them) and decoded by typemap, exactly as the capture reads it.

func qualified(st *verify.SourceTable) string {
	return pgx.Identifier{st.Schema, st.Name}.Sanitize()
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

func selectList(st *verify.SourceTable) string {
	names := make([]string, len(st.Cols))
	for i, c := range st.Cols {
		names[i] = quoteIdent(c.Name)
	}
	return strings.Join(names, ", ")
}

// New is the Source of the PostgreSQL server d connects to. Values
// are read in text format under typemap.SessionSettings (the Dialer sets
// them) and decoded by typemap, exactly as the capture reads them. With
// pushdown (unless the server's encoding is not UTF8: md5() and
// octet_length() see the server's bytes, the Go side UTF-8) chunk hashes
// are computed in SQL (sqlcanon.go).
func New(d *postgres.Dialer) verify.Source { return NewWith(d, typemap.Options{}) }

// NewWith is New for a pipeline whose columns are mapped
// by o (config time_as): verify decodes values as the capture does.
func NewWith(d *postgres.Dialer, o typemap.Options) verify.Source {
	return &pgSource{d: d, opts: o}
}

type pgSource struct {
	d     *postgres.Dialer
	opts  typemap.Options
	conn  *pgx.Conn // reconnected when a canceled query closed it
	types *postgres.TypeCache
	utf8  bool
}

func (p *pgSource) FormatPosition(pos uint64) string { return postgres.FormatLSN(pos) }

func (p *pgSource) Close() {
	if p.conn != nil {
		p.conn.Close(context.Background())
	}
	if p.types != nil {
		p.types.Close()
	}
}

func (p *pgSource) connect(ctx context.Context) error {
	if p.conn != nil && !p.conn.IsClosed() {
		return nil
	}
	conn, err := p.d.Connect(ctx)
	if err != nil {
		return err
	}
	p.conn = conn
	if p.types == nil {
		p.types = postgres.NewTypeCache(p.d)
		var enc string
		if err := conn.QueryRow(ctx, `SHOW server_encoding`).Scan(&enc); err != nil {
			return fmt.Errorf("read the source's server encoding: %w", err)
		}
		p.utf8 = enc == "UTF8"
	}
	return nil
}

// Nudge writes a transactional logical message (ignored by every pipeline:
// its prefix is tidemark's own) so that the capture sees a commit past the
// position verify waits for even when the pipeline's heartbeats are off.
// Best effort: a role without the right to emit messages simply waits.
func (p *pgSource) Nudge(ctx context.Context) {
	if p.conn == nil {
		return
	}
	conn, err := pgconn.ConnectConfig(ctx, p.conn.Config().Config.Copy())
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	_, _ = conn.Exec(ctx, `SELECT pg_logical_emit_message(true, 'tidemark.verify', '')`).ReadAll()
}

// describe reads a table's columns and key (the replica identity index when
// REPLICA IDENTITY USING INDEX is set, else the primary key: the key the
// capture uses). It returns nil, nil when the table does not exist.
func (s *pgSnap) Describe(ctx context.Context, t verify.TableName) (*verify.SourceTable, error) {
	q, lookup, schema, table := s.tx, s.types.Lookup, t.Schema, t.Table
	opts := s.opts
	var (
		oid      uint32
		replid   string
		estimate float64
	)
	err := q.QueryRow(ctx, `SELECT c.oid, c.relreplident::text, GREATEST(c.reltuples, coalesce(s.n_live_tup, -1))::float8
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, schema, table).Scan(&oid, &replid, &estimate)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the catalog entry of %s.%s: %w", schema, table, err)
	}
	st := &verify.SourceTable{Schema: schema, Name: table, Estimate: int64(estimate)}
	rows, err := q.Query(ctx, `SELECT attname::text, atttypid, atttypmod, format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, oid)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s.%s: %w", schema, table, err)
	}
	for rows.Next() {
		c := &verify.Column{}
		if err := rows.Scan(&c.Name, &c.TypeOID, &c.TypeMod, &c.TypeName); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the columns of %s.%s: %w", schema, table, err)
		}
		st.Cols = append(st.Cols, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s.%s: %w", schema, table, err)
	}
	for _, c := range st.Cols {
		m, err := opts.Map(typemap.Column{Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod}, lookup)
		if err != nil {
			return nil, fmt.Errorf("table %s.%s: %w", schema, table, err)
		}
		c.Arrow, c.Decode, c.Micros = m.ArrowType(), m.Decode, m.TimeMicros()
	}
	var pk, ri []string
	krows, err := q.Query(ctx, `SELECT i.indisprimary, i.indisreplident,
			ARRAY(SELECT a.attname::text FROM unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
			      JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.ord)
		FROM pg_index i WHERE i.indrelid = $1 AND (i.indisprimary OR i.indisreplident)`, oid)
	if err != nil {
		return nil, fmt.Errorf("read the key of %s.%s: %w", schema, table, err)
	}
	for krows.Next() {
		var isPK, isRI bool
		var cols []string
		if err := krows.Scan(&isPK, &isRI, &cols); err != nil {
			krows.Close()
			return nil, fmt.Errorf("read the key of %s.%s: %w", schema, table, err)
		}
		if isPK {
			pk = cols
		}
		if isRI {
			ri = cols
		}
	}
	krows.Close()
	if err := krows.Err(); err != nil {
		return nil, fmt.Errorf("read the key of %s.%s: %w", schema, table, err)
	}
	key := pk
	if replid == "i" && len(ri) > 0 {
		key = ri
	}
	for _, k := range key {
		st.Key = append(st.Key, st.Col(k))
	}
	return st, nil
}

// snapshot is a REPEATABLE READ, READ ONLY transaction on the source and the
// WAL position it covers: every transaction visible in it committed below
// lsn (its commit record was inserted before the snapshot was taken, and
// lsn is the WAL insert position read after). The converse does not hold:
// a transaction whose commit record is below lsn may still have been in
// flight when the snapshot was taken; compare.go's rechecks account for it.
type pgSnap struct {
	tx    pgx.Tx
	lsn   uint64
	types *postgres.TypeCache
	opts  typemap.Options
	utf8  bool
}

func (p *pgSource) Snapshot(ctx context.Context) (verify.Snapshot, error) {
	if err := p.connect(ctx); err != nil {
		return nil, err
	}
	tx, err := p.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin a snapshot on the source: %w", err)
	}
	// The first statement takes the snapshot; the position is read after it.
	var s string
	if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("read the source's WAL position: %w", err)
	}
	lsn, err := postgres.ParseLSN(s)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	// Chunk hashing groups by chunk: give the hash aggregate room. verify's
	// queries are long by design, and the transaction idles while verify
	// waits for silver: a role's timeouts must not cut them short.
	if _, err := tx.Exec(ctx, `SET LOCAL work_mem = '64MB'; SET LOCAL statement_timeout = 0; SET LOCAL idle_in_transaction_session_timeout = 0`); err != nil {
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("set work_mem on the source: %w", err)
	}
	return &pgSnap{tx: tx, lsn: lsn, types: p.types, opts: p.opts, utf8: p.utf8}, nil
}

func (s *pgSnap) Position() uint64 { return s.lsn }

func (s *pgSnap) Close() { _ = s.tx.Rollback(context.Background()) }

func (s *pgSnap) Pushdown(st *verify.SourceTable) bool {
	if !s.utf8 {
		return false
	}
	_, ok1 := sqlFields(st.Cols)
	_, ok2 := sqlFields(st.Key)
	return ok1 && ok2
}

// textQuery runs sql returning text-format values from an unnamed
// statement (no plan cache to go stale).
func textQuery(ctx context.Context, tx pgx.Tx, sql string, args ...any) (pgx.Rows, error) {
	return tx.Query(ctx, sql, append([]any{pgx.QueryExecModeDescribeExec, pgx.QueryResultFormats{pgx.TextFormatCode}}, args...)...)
}

// HashChunks hashes the chunks in one GROUP BY query.
func (s *pgSnap) HashChunks(ctx context.Context, st *verify.SourceTable, n int) (map[int]*verify.ChunkSum, error) {
	rowSQL, _ := sqlFields(st.Cols)
	keySQL, _ := sqlFields(st.Key)
	out := map[int]*verify.ChunkSum{}
	sql := fmt.Sprintf(`SELECT b, count(*), sum(%s)::text FROM (SELECT %s AS b, md5(%s) AS h FROM %s) s GROUP BY b`,
		sqlRowHash("h"), sqlBucket(keySQL, n), rowSQL, qualified(st))
	rows, err := s.tx.Query(ctx, sql, pgx.QueryExecModeDescribeExec)
	if err != nil {
		return nil, pgPushdownErr(ctx, fmt.Errorf("hash the chunks of %s at the source: %w", qualified(st), err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			b   int
			n   int64
			sum string
		)
		if err := rows.Scan(&b, &n, &sum); err != nil {
			return nil, fmt.Errorf("hash the chunks of %s at the source: %w", qualified(st), err)
		}
		c := &verify.ChunkSum{N: n}
		if c.Sum, err = verify.ParseI128(sum); err != nil {
			return nil, err
		}
		out[b] = c
	}
	if err := rows.Err(); err != nil {
		return nil, pgPushdownErr(ctx, fmt.Errorf("hash the chunks of %s at the source: %w", qualified(st), err))
	}
	return out, nil
}

// pgPushdownErr marks an error the server raised (not a lost connection or
// a canceled query) as errPushdown.
func pgPushdownErr(ctx context.Context, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && ctx.Err() == nil {
		return fmt.Errorf("%w: %w", verify.ErrPushdown, err)
	}
	return err
}

// DrillChunks reads the key and row MD5 of the rows in the chunks.
func (s *pgSnap) DrillChunks(ctx context.Context, st *verify.SourceTable, n int, chunks map[int]bool, fn func(keyVals []any, key string, row verify.Digest) error) error {
	rowSQL, _ := sqlFields(st.Cols)
	keySQL, _ := sqlFields(st.Key)
	list := make([]int32, 0, len(chunks))
	for b := range chunks {
		list = append(list, int32(b))
	}
	keys := make([]string, len(st.Key))
	for i, k := range st.Key {
		keys[i] = quoteIdent(k.Name)
	}
	sql := fmt.Sprintf(`SELECT %s, md5(%s) FROM %s WHERE %s = ANY($1::int[])`,
		strings.Join(keys, ", "), rowSQL, qualified(st), sqlBucket(keySQL, n))
	rows, err := textQuery(ctx, s.tx, sql, list)
	if err != nil {
		return fmt.Errorf("read the rows of %d chunks of %s at the source: %w", len(list), qualified(st), err)
	}
	defer rows.Close()
	var buf []byte
	for rows.Next() {
		raw := rows.RawValues()
		kv := verify.DecodeRow(st.Key, raw[:len(st.Key)])
		buf = verify.CanonOf(buf[:0], st.Key, kv)
		var d verify.Digest
		if _, err := hex.Decode(d[:], raw[len(st.Key)]); err != nil {
			return fmt.Errorf("read the rows of %s at the source: bad md5 %q", qualified(st), raw[len(st.Key)])
		}
		if err := fn(kv, string(buf), d); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the rows of %d chunks of %s at the source: %w", len(list), qualified(st), err)
	}
	return nil
}

// Scan reads every row of the table at the snapshot.
func (s *pgSnap) Scan(ctx context.Context, st *verify.SourceTable, fn func(vals []any) error) error {
	rows, err := textQuery(ctx, s.tx, `SELECT `+selectList(st)+` FROM `+qualified(st))
	if err != nil {
		return fmt.Errorf("read %s at the source: %w", qualified(st), err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(verify.DecodeRow(st.Cols, rows.RawValues())); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s at the source: %w", qualified(st), err)
	}
	return nil
}

// fetchBatch bounds the keys looked up by one query.
const fetchBatch = 500

// tidExpr is the tuple identity in SQL.
const tidExpr = `xmin::text || ':' || ctid::text`

// fetch reads the rows of the given keys (key values in lake form) at the
// snapshot, by key lookups on the table's key index. Keys whose values
// have no SQL literal (dates beyond year 9999, ...) are found by streaming
// the table once instead.
func (s *pgSnap) Fetch(ctx context.Context, st *verify.SourceTable, keys [][]any) (map[string]*verify.Fetched, error) {
	out := map[string]*verify.Fetched{}
	var lookup [][]string
	var rest map[string]bool
	var buf []byte
	for _, kv := range keys {
		lits := make([]string, len(kv))
		ok := true
		for i, v := range kv {
			if us, isInt := v.(int64); isInt && st.Key[i].Micros {
				// time_as: micros: microseconds since midnight, 24:00:00
				// (which a Time64 cannot hold) included.
				lits[i] = "24:00:00"
				if us != 86_400_000_000 {
					lits[i], _ = keyLiteral(arrow.Time64(us), st.Key[i].Arrow)
				}
				continue
			}
			if lits[i], ok = keyLiteral(v, st.Key[i].Arrow); !ok {
				break
			}
		}
		if ok {
			lookup = append(lookup, lits)
			continue
		}
		if rest == nil {
			rest = map[string]bool{}
		}
		buf = verify.CanonOf(buf[:0], st.Key, kv)
		rest[string(buf)] = true
	}
	n := len(st.Cols)
	read := func(sql string, args []any, keep func(key []byte) bool) error {
		rows, err := textQuery(ctx, s.tx, sql, args...)
		if err != nil {
			return fmt.Errorf("read rows of %s by key at the source: %w", qualified(st), err)
		}
		defer rows.Close()
		for rows.Next() {
			raw := rows.RawValues()
			vals := verify.DecodeRow(st.Cols, raw[:n])
			buf = verify.CanonOf(buf[:0], st.Key, st.KeyVals(vals))
			if keep(buf) {
				out[string(buf)] = &verify.Fetched{Vals: vals, TID: string(raw[n])}
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read rows of %s by key at the source: %w", qualified(st), err)
		}
		return nil
	}
	keyCols := make([]string, len(st.Key))
	for i, k := range st.Key {
		keyCols[i] = quoteIdent(k.Name)
	}
	for len(lookup) > 0 {
		batch := lookup[:min(len(lookup), fetchBatch)]
		lookup = lookup[len(batch):]
		var sql strings.Builder
		var args []any
		fmt.Fprintf(&sql, "SELECT %s, %s FROM %s WHERE (%s) IN (", selectList(st), tidExpr, qualified(st), strings.Join(keyCols, ", "))
		for j, lits := range batch {
			if j > 0 {
				sql.WriteString(", ")
			}
			sql.WriteString("(")
			for i, l := range lits {
				if i > 0 {
					sql.WriteString(", ")
				}
				args = append(args, l)
				fmt.Fprintf(&sql, "$%d::text::%s", len(args), st.Key[i].TypeName)
			}
			sql.WriteString(")")
		}
		sql.WriteString(")")
		if err := read(sql.String(), args, func([]byte) bool { return true }); err != nil {
			return nil, err
		}
	}
	if len(rest) > 0 {
		sql := fmt.Sprintf("SELECT %s, %s FROM %s", selectList(st), tidExpr, qualified(st))
		if err := read(sql, nil, func(key []byte) bool { return rest[string(key)] }); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// keyLiteral returns PostgreSQL input text for a key value in lake form
// (the inverse of typemap's decoding), or false when there is no simple one.
func keyLiteral(v any, t arrow.DataType) (string, bool) {
	switch x := v.(type) {
	case int32:
		return strconv.FormatInt(int64(x), 10), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case string:
		return x, true
	case bool:
		if x {
			return "t", true
		}
		return "f", true
	case []byte:
		return `\x` + hex.EncodeToString(x), true
	case decimal128.Num:
		return verify.DecimalText(x, verify.DecimalScale(t)), true
	case float32:
		return floatLiteral(float64(x), 32), true
	case float64:
		return floatLiteral(x, 64), true
	case arrow.Date32:
		switch x {
		case math.MaxInt32:
			return "infinity", true
		case -math.MaxInt32, math.MinInt32:
			return "-infinity", true
		}
		tm := time.Unix(int64(x)*86400, 0).UTC()
		if tm.Year() < 1 || tm.Year() > 9999 {
			return "", false
		}
		return tm.Format("2006-01-02"), true
	case arrow.Time64:
		return time.UnixMicro(int64(x)).UTC().Format("15:04:05.999999"), true
	case arrow.Timestamp:
		switch x {
		case math.MaxInt64:
			return "infinity", true
		case -math.MaxInt64, math.MinInt64:
			return "-infinity", true
		}
		tm := time.UnixMicro(int64(x)).UTC()
		if tm.Year() < 1 || tm.Year() > 9999 {
			return "", false
		}
		s := tm.Format("2006-01-02 15:04:05.999999")
		if ts, ok := t.(*arrow.TimestampType); ok && ts.TimeZone != "" {
			s += "+00"
		}
		return s, true
	}
	return "", false
}

func floatLiteral(f float64, bits int) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}
