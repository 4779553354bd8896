package myverify

import (
	"context"
	"crypto/md5"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"

	"github.com/tidemark/tidemark/internal/source/mysql"
	"github.com/tidemark/tidemark/internal/verify"
)

// The MySQL and MariaDB side of a verification. Values are read in the
// text protocol with mysql.Mapping.SelectExpr under mysql.SessionVariables
// and decoded by Mapping.DecodeText, exactly as the capture's snapshot
// reads them. Snapshots are START TRANSACTION WITH CONSISTENT SNAPSHOT;
// their position is mysql.SnapshotPosition (MariaDB: the snapshot's own
// binlog position, exact).
//
// Chunk hashes are computed in MySQL's SQL (myCanon below, the twin of
// canon.go) for the types whose canonical text SQL can write exactly;
// a table with another type (float, double, time, json) is hashed in Go
// from its rows. As in PostgreSQL the SQL is an accelerator, never the
// judge: every reported difference comes from values decoded in Go.
//
// MySQL has no row version to read, so fetched.tid is the row's digest.

// New is the Source of the MySQL or MariaDB server that dsn (a
// go-sql-driver DSN setting mysql.SessionVariables, as mysql.Options.DSN
// writes it) connects to.
func New(dsn string) (verify.Source, error) { return NewWith(dsn, "") }

// NewWith is New for a capture whose TIME columns land as timeAs
// (mysql.Options.TimeAs: "" or mysql.TimeAsMicros, or mysql.TimeAsText).
func NewWith(dsn, timeAs string) (verify.Source, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxIdleConns(2)
	return &mySource{db: db, timeAs: timeAs}, nil
}

type mySource struct {
	db     *sql.DB
	flavor mysql.Flavor
	timeAs string
}

func (p *mySource) FormatPosition(pos uint64) string { return mysql.FormatPosition("", pos) }

func (p *mySource) Close() { _ = p.db.Close() }

// Nudge does nothing: a verification's snapshot position is the binlog's
// end, which the capture reaches without a new commit.
func (p *mySource) Nudge(context.Context) {}

func (p *mySource) Snapshot(ctx context.Context) (verify.Snapshot, error) {
	if p.flavor == "" {
		var v string
		if err := p.db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
			return nil, mysql.Classify(fmt.Errorf("connect to the source: %w", err))
		}
		p.flavor = mysql.FlavorOf(v)
	}
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return nil, mysql.Classify(fmt.Errorf("connect to the source: %w", err))
	}
	fail := func(err error) (verify.Snapshot, error) {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		_ = conn.Close()
		return nil, err
	}
	if err := mysql.CheckSession(ctx, conn); err != nil {
		return fail(err)
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return fail(mysql.Classify(fmt.Errorf("begin a snapshot on the source: %w", err)))
	}
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return fail(mysql.Classify(fmt.Errorf("begin a snapshot on the source: %w", err)))
	}
	pos, err := mysql.SnapshotPosition(ctx, conn, p.flavor)
	if err != nil {
		return fail(err)
	}
	return &mySnap{conn: conn, db: p.db, pos: pos, timeAs: p.timeAs}, nil
}

type mySnap struct {
	conn   *sql.Conn
	db     *sql.DB
	pos    uint64
	timeAs string
}

func (s *mySnap) Position() uint64 { return s.pos }

func (s *mySnap) Close() {
	if s.conn == nil {
		return
	}
	_, _ = s.conn.ExecContext(context.Background(), "ROLLBACK")
	_ = s.conn.Close()
	s.conn = nil
}

// myCol is a MySQL column's own description.
type myCol struct {
	c mysql.Column
	m *mysql.Mapping
}

func myNative(c *verify.Column) *myCol { return c.Native.(*myCol) }

func myQualified(st *verify.SourceTable) string {
	return mysql.QuoteIdent(st.Schema) + "." + mysql.QuoteIdent(st.Name)
}

// Describe reads the columns and the key as the capture does
// (mysql.LoadColumns).
func (s *mySnap) Describe(ctx context.Context, t verify.TableName) (*verify.SourceTable, error) {
	cols, key, err := mysql.LoadColumns(ctx, s.db, t.Schema, t.Table)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", t, err)
	}
	if len(cols) == 0 {
		return nil, nil
	}
	st := &verify.SourceTable{Schema: t.Schema, Name: t.Table, Estimate: -1}
	for _, c := range cols {
		c.TimeAs = s.timeAs
		m, err := mysql.Map(c)
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", t, err)
		}
		st.Cols = append(st.Cols, &verify.Column{Name: c.Name, Arrow: m.ArrowType(), Decode: m.DecodeText, Native: &myCol{c: c, m: m}})
	}
	for _, k := range key {
		if c := st.Col(k); c != nil {
			st.Key = append(st.Key, c)
		}
	}
	var rows sql.NullInt64
	if err := s.db.QueryRowContext(ctx, "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		t.Schema, t.Table).Scan(&rows); err == nil && rows.Valid {
		st.Estimate = rows.Int64
	}
	return st, nil
}

func mySelectList(cols []*verify.Column) string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = myNative(c).m.SelectExpr()
	}
	return strings.Join(out, ", ")
}

// query runs q on the snapshot and calls fn with each row's raw values
// (nil: NULL), valid until fn returns.
func (s *mySnap) query(ctx context.Context, what, q string, args []any, fn func(raw [][]byte) error) error {
	rs, err := s.conn.QueryContext(ctx, q, args...)
	if err != nil {
		return mysql.Classify(fmt.Errorf("%s: %w", what, err))
	}
	defer rs.Close()
	cols, err := rs.Columns()
	if err != nil {
		return mysql.Classify(fmt.Errorf("%s: %w", what, err))
	}
	raw := make([]sql.RawBytes, len(cols))
	ptrs := make([]any, len(cols))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	vals := make([][]byte, len(cols))
	for rs.Next() {
		if err := rs.Scan(ptrs...); err != nil {
			return mysql.Classify(fmt.Errorf("%s: %w", what, err))
		}
		for i, b := range raw {
			vals[i] = b
		}
		if err := fn(vals); err != nil {
			return err
		}
	}
	if err := rs.Err(); err != nil {
		return mysql.Classify(fmt.Errorf("%s: %w", what, err))
	}
	return nil
}

func (s *mySnap) Scan(ctx context.Context, st *verify.SourceTable, fn func(vals []any) error) error {
	return s.query(ctx, "read "+st.String()+" at the source", "SELECT "+mySelectList(st.Cols)+" FROM "+myQualified(st), nil,
		func(raw [][]byte) error { return fn(verify.DecodeRow(st.Cols, raw)) })
}

func (s *mySnap) Pushdown(st *verify.SourceTable) bool {
	_, ok1 := myFields(st.Cols)
	_, ok2 := myFields(st.Key)
	return ok1 && ok2
}

// myPushdownErr marks an error the server raised (not a lost connection or
// a canceled query) as errPushdown.
func myPushdownErr(ctx context.Context, err error) error {
	if _, _, ok := mysql.ServerError(err); ok && ctx.Err() == nil {
		return fmt.Errorf("%w: %w", verify.ErrPushdown, err)
	}
	return err
}

func (s *mySnap) HashChunks(ctx context.Context, st *verify.SourceTable, n int) (map[int]*verify.ChunkSum, error) {
	rowSQL, _ := myFields(st.Cols)
	keySQL, _ := myFields(st.Key)
	q := fmt.Sprintf("SELECT b, COUNT(*), CAST(SUM(%s) AS CHAR) FROM (SELECT %s AS b, MD5(%s) AS h FROM %s) s GROUP BY b",
		myRowHash("h"), myBucket(keySQL, n), rowSQL, myQualified(st))
	out := map[int]*verify.ChunkSum{}
	what := "hash the chunks of " + st.String() + " at the source"
	err := s.query(ctx, what, q, nil, func(raw [][]byte) error {
		b, err1 := strconv.Atoi(string(raw[0]))
		cnt, err2 := strconv.ParseInt(string(raw[1]), 10, 64)
		sum, err3 := verify.ParseI128(string(raw[2]))
		if err1 != nil || err2 != nil || err3 != nil {
			return fmt.Errorf("%s: bad row %q, %q, %q", what, raw[0], raw[1], raw[2])
		}
		out[b] = &verify.ChunkSum{N: cnt, Sum: sum}
		return nil
	})
	if err != nil {
		return nil, myPushdownErr(ctx, err)
	}
	return out, nil
}

func (s *mySnap) DrillChunks(ctx context.Context, st *verify.SourceTable, n int, chunks map[int]bool, fn func(keyVals []any, key string, row verify.Digest) error) error {
	rowSQL, _ := myFields(st.Cols)
	keySQL, _ := myFields(st.Key)
	list := make([]string, 0, len(chunks))
	for b := range chunks {
		list = append(list, strconv.Itoa(b))
	}
	q := fmt.Sprintf("SELECT %s, MD5(%s) FROM %s WHERE %s IN (%s)",
		mySelectList(st.Key), rowSQL, myQualified(st), myBucket(keySQL, n), strings.Join(list, ", "))
	var buf []byte
	k := len(st.Key)
	return s.query(ctx, fmt.Sprintf("read the rows of %d chunks of %s at the source", len(list), st), q, nil, func(raw [][]byte) error {
		kv := verify.DecodeRow(st.Key, raw[:k])
		buf = verify.CanonOf(buf[:0], st.Key, kv)
		var d verify.Digest
		if _, err := hex.Decode(d[:], raw[k]); err != nil {
			return fmt.Errorf("read the rows of %s at the source: bad md5 %q", st, raw[k])
		}
		return fn(kv, string(buf), d)
	})
}

// Fetch looks the keys up on the table's key (in batches), or, when a key
// value has no exact literal, reads the whole table once. Rows are kept
// only when their canonical key is one asked for: a case-insensitive
// collation may match more.
func (s *mySnap) Fetch(ctx context.Context, st *verify.SourceTable, keys [][]any) (map[string]*verify.Fetched, error) {
	want := map[string]bool{}
	var lookup [][]any
	scan := false
	var buf []byte
	for _, kv := range keys {
		buf = verify.CanonOf(buf[:0], st.Key, kv)
		want[string(buf)] = true
		lits := make([]any, len(kv))
		ok := true
		for i, v := range kv {
			if lits[i], ok = myKeyLiteral(v, st.Key[i]); !ok {
				break
			}
		}
		if !ok {
			scan = true
		}
		lookup = append(lookup, lits)
	}
	out := map[string]*verify.Fetched{}
	var rbuf []byte
	keep := func(raw [][]byte) error {
		vals := verify.DecodeRow(st.Cols, raw)
		buf = verify.CanonOf(buf[:0], st.Key, st.KeyVals(vals))
		if want[string(buf)] {
			rbuf = verify.CanonOf(rbuf[:0], st.Cols, vals)
			sum := md5.Sum(rbuf)
			out[string(buf)] = &verify.Fetched{Vals: vals, TID: hex.EncodeToString(sum[:])}
		}
		return nil
	}
	what := "read rows of " + st.String() + " by key at the source"
	sel := "SELECT " + mySelectList(st.Cols) + " FROM " + myQualified(st)
	if scan {
		return out, s.query(ctx, what, sel, nil, keep)
	}
	keyCols := make([]string, len(st.Key))
	for i, k := range st.Key {
		keyCols[i] = mysql.QuoteIdent(k.Name)
	}
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(st.Key)), ", ") + ")"
	for len(lookup) > 0 {
		batch := lookup[:min(len(lookup), fetchBatch)]
		lookup = lookup[len(batch):]
		var args []any
		for _, lits := range batch {
			args = append(args, lits...)
		}
		q := sel + " WHERE (" + strings.Join(keyCols, ", ") + ") IN (" + strings.TrimSuffix(strings.Repeat(tuple+", ", len(batch)), ", ") + ")"
		if err := s.query(ctx, what, q, args, keep); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// myKeyLiteral returns an argument that selects the key value v (lake
// form) of column c, or false when there is no exact one. A literal may
// select more rows (collations); never fewer.
func myKeyLiteral(v any, c *verify.Column) (any, bool) {
	dt := strings.ToLower(myNative(c).c.DataType)
	switch x := v.(type) {
	case int32:
		if isMyInt(dt) || dt == "year" {
			return int64(x), true
		}
	case int64:
		if isMyInt(dt) {
			return x, true
		}
	case string:
		switch dt {
		case "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum":
			return x, true
		}
	case []byte:
		switch dt {
		case "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob":
			return x, true
		}
	case decimal128.Num:
		if dt == "decimal" || dt == "numeric" || dt == "bigint" {
			return verify.DecimalText(x, verify.DecimalScale(c.Arrow)), true
		}
	case arrow.Date32:
		if dt == "date" {
			tm := time.Unix(int64(x)*86400, 0).UTC()
			if tm.Year() >= 1 && tm.Year() <= 9999 {
				return tm.Format("2006-01-02"), true
			}
		}
	case arrow.Timestamp:
		if dt == "datetime" || dt == "timestamp" {
			tm := time.UnixMicro(int64(x)).UTC()
			if tm.Year() >= 1 && tm.Year() <= 9999 {
				return tm.Format("2006-01-02 15:04:05.999999"), true
			}
		}
	}
	return nil, false
}

func isMyInt(dt string) bool {
	switch dt {
	case "tinyint", "smallint", "mediumint", "int", "integer", "bigint":
		return true
	}
	return false
}

// myCanon returns a MySQL expression giving the canonical text (canon.go)
// of the non-NULL value of column c, or false for a type whose canonical
// text MySQL's SQL cannot write exactly (float and double: IEEE bits;
// time; MySQL's json, which DecodeText normalizes).
func myCanon(c *verify.Column) (string, bool) {
	n := myNative(c)
	q := mysql.QuoteIdent(c.Name)
	dt := strings.ToLower(n.c.DataType)
	switch c.Arrow.ID() {
	case arrow.INT32, arrow.INT64:
		switch {
		case isMyInt(dt):
			return "CAST(" + q + " AS CHAR)", true
		case dt == "year", dt == "bit":
			return "CAST(" + q + "+0 AS CHAR)", true
		}
	case arrow.DECIMAL128:
		switch {
		case dt == "decimal", dt == "numeric", dt == "fixed", isMyInt(dt):
			return "CAST(" + q + " AS CHAR)", true
		case dt == "bit":
			return "CAST(" + q + "+0 AS CHAR)", true
		}
	case arrow.STRING:
		switch dt {
		case "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set":
			return "CONVERT(" + q + " USING utf8mb4)", true
		case "uuid", "inet4", "inet6":
			return "CONVERT(CAST(" + q + " AS CHAR) USING utf8mb4)", true
		}
	case arrow.BINARY:
		return "LOWER(HEX(" + q + "))", true
	case arrow.DATE32:
		return "CAST(DATEDIFF(" + q + ", '1970-01-01') AS CHAR)", true
	case arrow.TIMESTAMP:
		return "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + q + ") AS CHAR)", true
	}
	return "", false
}

// myFields is sqlFields in MySQL: the canonical concatenation of cols, each
// a field ('N', or 'V' <length> ':' <text>). A canonical text that comes
// out NULL for a non-NULL value (a zero date) is written "?": such a value
// never equals the Go side's, so its chunk is drilled into.
func myFields(cols []*verify.Column) (string, bool) {
	parts := make([]string, 0, len(cols))
	for _, c := range cols {
		cn, ok := myCanon(c)
		if !ok {
			return "", false
		}
		x := "COALESCE(" + cn + ", '?')"
		q := mysql.QuoteIdent(c.Name)
		parts = append(parts, fmt.Sprintf("IF(%s IS NULL, 'N', CONCAT('V', LENGTH(%s), ':', %s))", q, x, x))
	}
	if len(parts) == 0 {
		return "''", true
	}
	return "CONCAT(" + strings.Join(parts, ", ") + ")", true
}

// myBucket is bucketOf in MySQL, from a canonical key expression.
func myBucket(keyCanon string, n int) string {
	return fmt.Sprintf("((CAST(CONV(SUBSTR(MD5(%s), 1, 8), 16, 10) AS UNSIGNED) & 2147483647) %% %d)", keyCanon, n)
}

// myRowHash is rowHash in MySQL over the hex MD5 h of a row: its first 64
// bits as an unsigned DECIMAL, less 2^64 when the top bit is set (exact;
// SUM of DECIMAL is exact too).
func myRowHash(h string) string {
	return fmt.Sprintf("(CAST(CONV(SUBSTR(%[1]s, 1, 16), 16, 10) AS DECIMAL(20,0)) - IF(ASCII(%[1]s) >= 56, 18446744073709551616, 0))", h)
}

// fetchBatch bounds the keys looked up by one query.
const fetchBatch = 500
