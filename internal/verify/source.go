package verify

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
)

// This file reads the source: a table's columns and key, consistent
// snapshots with the WAL position they cover, chunk hashes (in SQL, or in
// Go when SQL cannot compute them), and rows by key. Every value is read in
// PostgreSQL's text format under typemap.SessionSettings (the Dialer sets
// them) and decoded by typemap, exactly as the capture reads it.

// column is one source column and its lake mapping.
type column struct {
	name     string
	typeOID  uint32
	typeMod  int32
	typeName string // format_type(atttypid, atttypmod)
	m        typemap.Mapping
	arrow    arrow.DataType
}

// sourceTable is a source table as the catalog describes it.
type sourceTable struct {
	schema, name string
	cols         []*column
	key          []*column
	estimate     int64 // max(reltuples, n_live_tup), -1 if unknown
}

func (st *sourceTable) qualified() string { return pgx.Identifier{st.schema, st.name}.Sanitize() }

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// describe reads a table's columns and key (the replica identity index when
// REPLICA IDENTITY USING INDEX is set, else the primary key: the key the
// capture uses). It returns nil, nil when the table does not exist.
func describe(ctx context.Context, q pgx.Tx, lookup typemap.Lookup, schema, table string) (*sourceTable, error) {
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
	st := &sourceTable{schema: schema, name: table, estimate: int64(estimate)}
	rows, err := q.Query(ctx, `SELECT attname::text, atttypid, atttypmod, format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, oid)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s.%s: %w", schema, table, err)
	}
	for rows.Next() {
		c := &column{}
		if err := rows.Scan(&c.name, &c.typeOID, &c.typeMod, &c.typeName); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the columns of %s.%s: %w", schema, table, err)
		}
		st.cols = append(st.cols, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s.%s: %w", schema, table, err)
	}
	for _, c := range st.cols {
		m, err := typemap.Map(typemap.Column{Name: c.name, TypeOID: c.typeOID, TypeMod: c.typeMod}, lookup)
		if err != nil {
			return nil, fmt.Errorf("table %s.%s: %w", schema, table, err)
		}
		c.m, c.arrow = m, m.ArrowType()
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
		st.key = append(st.key, st.col(k))
	}
	return st, nil
}

func (st *sourceTable) col(name string) *column {
	for _, c := range st.cols {
		if c.name == name {
			return c
		}
	}
	return nil
}

func (st *sourceTable) keyNames() []string {
	out := make([]string, len(st.key))
	for i, c := range st.key {
		out[i] = c.name
	}
	return out
}

// snapshot is a REPEATABLE READ, READ ONLY transaction on the source and the
// WAL position it covers: every transaction visible in it committed below
// lsn (its commit record was inserted before the snapshot was taken, and
// lsn is the WAL insert position read after). The converse does not hold:
// a transaction whose commit record is below lsn may still have been in
// flight when the snapshot was taken; compare.go's rechecks account for it.
type snapshot struct {
	tx  pgx.Tx
	lsn uint64
}

func beginSnapshot(ctx context.Context, conn *pgx.Conn) (*snapshot, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
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
	return &snapshot{tx: tx, lsn: lsn}, nil
}

func (s *snapshot) close(ctx context.Context) {
	if s != nil && s.tx != nil {
		_ = s.tx.Rollback(ctx)
	}
}

// textQuery runs sql returning text-format values from an unnamed
// statement (no plan cache to go stale).
func textQuery(ctx context.Context, tx pgx.Tx, sql string, args ...any) (pgx.Rows, error) {
	return tx.Query(ctx, sql, append([]any{pgx.QueryExecModeDescribeExec, pgx.QueryResultFormats{pgx.TextFormatCode}}, args...)...)
}

// chunkSum is the hash of one chunk: how many rows it holds and the sum of
// their row hashes (exact: PostgreSQL sums bigints into a numeric). Sums
// are order-independent, so the source and silver can be read in any order.
type chunkSum struct {
	n   int64
	sum i128
}

// i128 is a two's-complement 128-bit integer, enough for 2^63 sums of
// int64s.
type i128 struct{ hi, lo uint64 }

func (u *i128) add(x int64) {
	lo := u.lo + uint64(x)
	carry := uint64(0)
	if lo < u.lo {
		carry = 1
	}
	ext := uint64(0)
	if x < 0 {
		ext = math.MaxUint64
	}
	u.hi += ext + carry
	u.lo = lo
}

func (c *chunkSum) add(d digest) {
	c.n++
	c.sum.add(rowHash(d))
}

func parseI128(s string) (i128, error) {
	b, ok := new(big.Int).SetString(s, 10)
	if !ok || b.BitLen() > 127 {
		return i128{}, fmt.Errorf("bad chunk sum %q", s)
	}
	if b.Sign() < 0 {
		b.Add(b, new(big.Int).Lsh(big.NewInt(1), 128))
	}
	lo := new(big.Int).And(b, new(big.Int).SetUint64(math.MaxUint64)).Uint64()
	hi := new(big.Int).Rsh(b, 64).Uint64()
	return i128{hi: hi, lo: lo}, nil
}

// sourceRow is a source row decoded into lake values (undecodable for a
// value the lake cannot hold).
type sourceRow struct {
	vals []any
}

// decodeRow decodes raw text values of cols.
func decodeRow(cols []*column, raw [][]byte) []any {
	vals := make([]any, len(cols))
	for i, c := range cols {
		if raw[i] == nil {
			continue
		}
		v, err := c.m.Decode(raw[i])
		if err != nil {
			vals[i] = undecodable{raw: string(raw[i])}
			continue
		}
		vals[i] = v
	}
	return vals
}

// canonOf appends the canonical fields of vals (of cols) to buf.
func canonOf(buf []byte, cols []*column, vals []any) []byte {
	for i, c := range cols {
		buf = appendField(buf, vals[i], c.arrow)
	}
	return buf
}

// keyVals picks the key values out of a row's values.
func (st *sourceTable) keyVals(vals []any) []any {
	out := make([]any, len(st.key))
	for i, k := range st.key {
		for j, c := range st.cols {
			if c == k {
				out[i] = vals[j]
			}
		}
	}
	return out
}

func (st *sourceTable) selectList() string {
	names := make([]string, len(st.cols))
	for i, c := range st.cols {
		names[i] = quoteIdent(c.name)
	}
	return strings.Join(names, ", ")
}

// sourceReader computes chunk hashes and drills into chunks, in SQL
// (pushdown) or by streaming the table's rows and hashing them in Go.
type sourceReader struct {
	st       *sourceTable
	n        int // chunks
	pushdown bool
	rowSQL   string // canonical row, SQL (pushdown only)
	keySQL   string // canonical key, SQL (pushdown only)
}

func newSourceReader(st *sourceTable, n int, pushdown bool) *sourceReader {
	r := &sourceReader{st: st, n: n}
	if pushdown {
		row, ok1 := sqlFields(st.cols)
		key, ok2 := sqlFields(st.key)
		if ok1 && ok2 {
			r.pushdown, r.rowSQL, r.keySQL = true, row, key
		}
	}
	return r
}

// chunks returns every non-empty chunk's hash at the snapshot.
func (r *sourceReader) chunks(ctx context.Context, s *snapshot) (map[int]*chunkSum, error) {
	out := map[int]*chunkSum{}
	if !r.pushdown {
		err := r.stream(ctx, s, func(key []byte, row digest, _ []any) error {
			b := bucketOf(md5.Sum(key), r.n)
			c := out[b]
			if c == nil {
				c = &chunkSum{}
				out[b] = c
			}
			c.add(row)
			return nil
		})
		return out, err
	}
	sql := fmt.Sprintf(`SELECT b, count(*), sum(%s)::text FROM (SELECT %s AS b, md5(%s) AS h FROM %s) s GROUP BY b`,
		sqlRowHash("h"), sqlBucket(r.keySQL, r.n), r.rowSQL, r.st.qualified())
	rows, err := s.tx.Query(ctx, sql, pgx.QueryExecModeDescribeExec)
	if err != nil {
		return nil, fmt.Errorf("hash the chunks of %s at the source: %w", r.st.qualified(), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			b   int
			n   int64
			sum string
		)
		if err := rows.Scan(&b, &n, &sum); err != nil {
			return nil, fmt.Errorf("hash the chunks of %s at the source: %w", r.st.qualified(), err)
		}
		c := &chunkSum{n: n}
		if c.sum, err = parseI128(sum); err != nil {
			return nil, err
		}
		out[b] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("hash the chunks of %s at the source: %w", r.st.qualified(), err)
	}
	return out, nil
}

// drill calls fn with the key values, canonical key and row digest of every
// row in the given chunks.
func (r *sourceReader) drill(ctx context.Context, s *snapshot, chunks map[int]bool, fn func(keyVals []any, key string, row digest) error) error {
	if !r.pushdown {
		return r.stream(ctx, s, func(key []byte, row digest, vals []any) error {
			if !chunks[bucketOf(md5.Sum(key), r.n)] {
				return nil
			}
			return fn(r.st.keyVals(vals), string(key), row)
		})
	}
	list := make([]int32, 0, len(chunks))
	for b := range chunks {
		list = append(list, int32(b))
	}
	keys := make([]string, len(r.st.key))
	for i, k := range r.st.key {
		keys[i] = quoteIdent(k.name)
	}
	sql := fmt.Sprintf(`SELECT %s, md5(%s) FROM %s WHERE %s = ANY($1::int[])`,
		strings.Join(keys, ", "), r.rowSQL, r.st.qualified(), sqlBucket(r.keySQL, r.n))
	rows, err := textQuery(ctx, s.tx, sql, list)
	if err != nil {
		return fmt.Errorf("read the rows of %d chunks of %s at the source: %w", len(list), r.st.qualified(), err)
	}
	defer rows.Close()
	var buf []byte
	for rows.Next() {
		raw := rows.RawValues()
		kv := decodeRow(r.st.key, raw[:len(r.st.key)])
		buf = canonOf(buf[:0], r.st.key, kv)
		var d digest
		if _, err := hex.Decode(d[:], raw[len(r.st.key)]); err != nil {
			return fmt.Errorf("read the rows of %s at the source: bad md5 %q", r.st.qualified(), raw[len(r.st.key)])
		}
		if err := fn(kv, string(buf), d); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the rows of %d chunks of %s at the source: %w", len(list), r.st.qualified(), err)
	}
	return nil
}

// stream reads every row of the table at the snapshot and hashes it in Go.
func (r *sourceReader) stream(ctx context.Context, s *snapshot, fn func(key []byte, row digest, vals []any) error) error {
	rows, err := textQuery(ctx, s.tx, `SELECT `+r.st.selectList()+` FROM `+r.st.qualified())
	if err != nil {
		return fmt.Errorf("read %s at the source: %w", r.st.qualified(), err)
	}
	defer rows.Close()
	var kbuf, rbuf []byte
	for rows.Next() {
		vals := decodeRow(r.st.cols, rows.RawValues())
		kbuf = canonOf(kbuf[:0], r.st.key, r.st.keyVals(vals))
		rbuf = canonOf(rbuf[:0], r.st.cols, vals)
		if err := fn(kbuf, md5.Sum(rbuf), vals); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read %s at the source: %w", r.st.qualified(), err)
	}
	return nil
}

// fetchBatch bounds the keys looked up by one query.
const fetchBatch = 500

// fetched is a source row read by key, with the identity of its tuple
// version (xmin and ctid): every UPDATE, DELETE and re-INSERT of the row
// makes a new version, so an unchanged identity between two snapshots
// proves the row was not touched in between.
type fetched struct {
	vals []any
	tid  string
}

// tidExpr is the tuple identity in SQL.
const tidExpr = `xmin::text || ':' || ctid::text`

// fetch reads the rows of the given keys (key values in lake form) at the
// snapshot, by key lookups on the table's key index. Keys whose values
// have no SQL literal (dates beyond year 9999, ...) are found by streaming
// the table once instead.
func (st *sourceTable) fetch(ctx context.Context, s *snapshot, keys [][]any) (map[string]*fetched, error) {
	out := map[string]*fetched{}
	var lookup [][]string
	var rest map[string]bool
	var buf []byte
	for _, kv := range keys {
		lits := make([]string, len(kv))
		ok := true
		for i, v := range kv {
			if lits[i], ok = keyLiteral(v, st.key[i].arrow); !ok {
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
		buf = canonOf(buf[:0], st.key, kv)
		rest[string(buf)] = true
	}
	n := len(st.cols)
	read := func(sql string, args []any, keep func(key []byte) bool) error {
		rows, err := textQuery(ctx, s.tx, sql, args...)
		if err != nil {
			return fmt.Errorf("read rows of %s by key at the source: %w", st.qualified(), err)
		}
		defer rows.Close()
		for rows.Next() {
			raw := rows.RawValues()
			vals := decodeRow(st.cols, raw[:n])
			buf = canonOf(buf[:0], st.key, st.keyVals(vals))
			if keep(buf) {
				out[string(buf)] = &fetched{vals: vals, tid: string(raw[n])}
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read rows of %s by key at the source: %w", st.qualified(), err)
		}
		return nil
	}
	keyCols := make([]string, len(st.key))
	for i, k := range st.key {
		keyCols[i] = quoteIdent(k.name)
	}
	for len(lookup) > 0 {
		batch := lookup[:min(len(lookup), fetchBatch)]
		lookup = lookup[len(batch):]
		var sql strings.Builder
		var args []any
		fmt.Fprintf(&sql, "SELECT %s, %s FROM %s WHERE (%s) IN (", st.selectList(), tidExpr, st.qualified(), strings.Join(keyCols, ", "))
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
				fmt.Fprintf(&sql, "$%d::text::%s", len(args), st.key[i].typeName)
			}
			sql.WriteString(")")
		}
		sql.WriteString(")")
		if err := read(sql.String(), args, func([]byte) bool { return true }); err != nil {
			return nil, err
		}
	}
	if len(rest) > 0 {
		sql := fmt.Sprintf("SELECT %s, %s FROM %s", st.selectList(), tidExpr, st.qualified())
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
		return decimalText(x, decimalScale(t)), true
	case float32:
		return floatLiteral(float64(x), 32), true
	case float64:
		return floatLiteral(x, 64), true
	case arrow.Date32:
		switch x {
		case math.MaxInt32:
			return "infinity", true
		case math.MinInt32:
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
		case math.MinInt64:
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
