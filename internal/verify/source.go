package verify

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// This file is the source side of a verification as the comparison sees
// it: a Source opens consistent snapshots; a Snapshot describes tables,
// hashes their chunks (in the source's SQL when it can), and reads rows by
// key. pgsource.go is PostgreSQL's, mysqlsource.go MySQL's and MariaDB's.
// Every value a Snapshot returns is in lake form, decoded exactly as the
// source's capture decodes it, so canon.go compares it with silver's.

// Source is the database a verification compares silver with. The
// composition root (internal/app) picks one by the source URL's scheme.
// A Source is used by one goroutine at a time.
type Source interface {
	// Snapshot opens a consistent, read-only view of the source and reads
	// the commit position it covers: every transaction visible in it
	// committed at or below Position.
	Snapshot(ctx context.Context) (Snapshot, error)
	// FormatPosition renders a commit position (cdc_source_lsn) as the
	// source writes it (PostgreSQL 16/B374D848, MySQL 000007:1234).
	FormatPosition(pos uint64) string
	// Nudge makes the source log a commit past every open snapshot's
	// position, so that an idle capture moves there even with its
	// heartbeats off. Best effort: it may do nothing.
	Nudge(ctx context.Context)
	// Close releases the source's connections.
	Close()
}

// Snapshot is one consistent view of the source. Its methods may run on
// other goroutines than the one that opened it, one at a time.
type Snapshot interface {
	// Position is the commit position the snapshot covers.
	Position() uint64
	// Describe reads a table's columns, in order, and its key (the key the
	// capture uses); nil, nil when the table does not exist.
	Describe(ctx context.Context, t TableName) (*sourceTable, error)
	// Scan calls fn with every row of the table, decoded (decodeRow).
	Scan(ctx context.Context, st *sourceTable, fn func(vals []any) error) error
	// Pushdown says whether HashChunks and DrillChunks can compute the
	// table's canonical rows in SQL; else the comparison hashes Scan's rows.
	Pushdown(st *sourceTable) bool
	// HashChunks returns, computed in SQL, every non-empty chunk's sum of
	// n chunks (bucketOf, rowHash). A failure of that SQL on the server
	// (a type or function the server refuses) wraps errPushdown: the
	// comparison then hashes Scan's rows instead.
	HashChunks(ctx context.Context, st *sourceTable, n int) (map[int]*chunkSum, error)
	// DrillChunks calls fn with the key values, canonical key and row
	// digest of every row in the given chunks, computed in SQL.
	DrillChunks(ctx context.Context, st *sourceTable, n int, chunks map[int]bool, fn func(keyVals []any, key string, row digest) error) error
	// Fetch reads the rows of the given keys (key values in lake form),
	// keyed by canonical key, each with an identity that changes whenever
	// the row is written (see fetched).
	Fetch(ctx context.Context, st *sourceTable, keys [][]any) (map[string]*fetched, error)
	// Close ends the snapshot; it may be called more than once.
	Close()
}

// column is one source column and its lake mapping.
type column struct {
	name  string
	arrow arrow.DataType
	// decode turns the source's text of a non-NULL value into its lake
	// value, as the capture does.
	decode func([]byte) (any, error)
	// typeOID, typeMod and typeName are PostgreSQL's (pg_attribute,
	// format_type); zero for other sources.
	typeOID  uint32
	typeMod  int32
	typeName string
	// micros: a PostgreSQL time landing as microseconds (time_as: micros,
	// typemap.Mapping.TimeMicros); its int64 values are not its input text.
	micros bool
	// native is the source's own description of the column (MySQL: its
	// *mysql.Mapping); nil for PostgreSQL.
	native any
}

// sourceTable is a source table as the source's catalog describes it.
type sourceTable struct {
	schema, name string
	cols         []*column
	key          []*column
	estimate     int64 // estimated rows, -1 if unknown
}

func (st *sourceTable) col(name string) *column {
	for _, c := range st.cols {
		if c.name == name {
			return c
		}
	}
	return nil
}

// rekey makes names the key st is compared by.
func (st *sourceTable) rekey(names []string) error {
	key := make([]*column, len(names))
	for i, n := range names {
		if key[i] = st.col(n); key[i] == nil {
			return fmt.Errorf("key column %q is not one of its columns", n)
		}
	}
	st.key = key
	return nil
}

func (st *sourceTable) keyNames() []string {
	out := make([]string, len(st.key))
	for i, c := range st.key {
		out[i] = c.name
	}
	return out
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

// chunkSum is the hash of one chunk: how many rows it holds and the sum of
// their row hashes (exact: the source's SQL sums bigints into a numeric or
// decimal). Sums are order-independent, so the source and silver can be
// read in any order.
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

// decodeRow decodes raw text values of cols (nil: NULL).
func decodeRow(cols []*column, raw [][]byte) []any {
	vals := make([]any, len(cols))
	for i, c := range cols {
		if raw[i] == nil {
			continue
		}
		v, err := c.decode(raw[i])
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

// fetched is a source row read by key, with an identity of its version:
// PostgreSQL's tuple version (xmin and ctid), which every UPDATE, DELETE
// and re-INSERT renews, so an unchanged identity between two snapshots
// proves the row was not touched in between; MySQL has none, and there it
// is the row's digest (an unchanged digest proves only that the row holds
// the same values: compare.go's rules still need silver's row older than
// the snapshot).
type fetched struct {
	vals []any
	tid  string
}

// errPushdown marks a failure of the chunk-hashing SQL.
var errPushdown = errors.New("chunk hashing at the source failed")

// sourceReader computes chunk hashes and drills into chunks, in SQL
// (pushdown) or by streaming the table's rows and hashing them in Go.
type sourceReader struct {
	st       *sourceTable
	n        int // chunks
	pushdown bool
}

func newSourceReader(s Snapshot, st *sourceTable, n int, pushdown bool) *sourceReader {
	return &sourceReader{st: st, n: n, pushdown: pushdown && s.Pushdown(st)}
}

// chunks returns every non-empty chunk's hash at the snapshot.
func (r *sourceReader) chunks(ctx context.Context, s Snapshot) (map[int]*chunkSum, error) {
	if r.pushdown {
		return s.HashChunks(ctx, r.st, r.n)
	}
	out := map[int]*chunkSum{}
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

// drill calls fn with the key values, canonical key and row digest of every
// row in the given chunks.
func (r *sourceReader) drill(ctx context.Context, s Snapshot, chunks map[int]bool, fn func(keyVals []any, key string, row digest) error) error {
	if r.pushdown {
		return s.DrillChunks(ctx, r.st, r.n, chunks, fn)
	}
	return r.stream(ctx, s, func(key []byte, row digest, vals []any) error {
		if !chunks[bucketOf(md5.Sum(key), r.n)] {
			return nil
		}
		return fn(r.st.keyVals(vals), string(key), row)
	})
}

// stream reads every row of the table at the snapshot and hashes it in Go.
func (r *sourceReader) stream(ctx context.Context, s Snapshot, fn func(key []byte, row digest, vals []any) error) error {
	var kbuf, rbuf []byte
	return s.Scan(ctx, r.st, func(vals []any) error {
		kbuf = canonOf(kbuf[:0], r.st.key, r.st.keyVals(vals))
		rbuf = canonOf(rbuf[:0], r.st.cols, vals)
		return fn(kbuf, md5.Sum(rbuf), vals)
	})
}

// qualifiedName is schema.table for messages.
func (st *sourceTable) String() string { return strings.Join([]string{st.schema, st.name}, ".") }
