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
// key. PostgreSQL's is internal/source/postgres/pgverify, MySQL's and
// MariaDB's internal/source/mysql/myverify: the exported types below are
// what such an implementation uses.
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
	Describe(ctx context.Context, t TableName) (*SourceTable, error)
	// Scan calls fn with every row of the table, decoded (decodeRow).
	Scan(ctx context.Context, st *SourceTable, fn func(vals []any) error) error
	// Pushdown says whether HashChunks and DrillChunks can compute the
	// table's canonical rows in SQL; else the comparison hashes Scan's rows.
	Pushdown(st *SourceTable) bool
	// HashChunks returns, computed in SQL, every non-empty chunk's sum of
	// n chunks (bucketOf, rowHash). A failure of that SQL on the server
	// (a type or function the server refuses) wraps errPushdown: the
	// comparison then hashes Scan's rows instead.
	HashChunks(ctx context.Context, st *SourceTable, n int) (map[int]*ChunkSum, error)
	// DrillChunks calls fn with the key values, canonical key and row
	// digest of every row in the given chunks, computed in SQL.
	DrillChunks(ctx context.Context, st *SourceTable, n int, chunks map[int]bool, fn func(keyVals []any, key string, row Digest) error) error
	// Fetch reads the rows of the given keys (key values in lake form),
	// keyed by canonical key, each with an identity that changes whenever
	// the row is written (see fetched).
	Fetch(ctx context.Context, st *SourceTable, keys [][]any) (map[string]*Fetched, error)
	// Close ends the snapshot; it may be called more than once.
	Close()
}

// Column is one source column and its lake mapping.
type Column struct {
	Name  string
	Arrow arrow.DataType
	// Decode turns the source's text of a non-NULL value into its lake
	// value, as the capture does.
	Decode func([]byte) (any, error)
	// TypeOID, TypeMod and TypeName are PostgreSQL's (pg_attribute,
	// format_type); zero for other sources.
	TypeOID  uint32
	TypeMod  int32
	TypeName string
	// Micros: a PostgreSQL time landing as microseconds (time_as: micros,
	// typemap.Mapping.TimeMicros); its int64 values are not its input text.
	Micros bool
	// Native is the source's own description of the column (MySQL: its
	// *mysql.Mapping); nil for PostgreSQL.
	Native any
}

// SourceTable is a source table as the source's catalog describes it.
type SourceTable struct {
	Schema, Name string
	Cols         []*Column
	Key          []*Column
	Estimate     int64 // estimated rows, -1 if unknown
}

func (st *SourceTable) Col(name string) *Column {
	for _, c := range st.Cols {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// rekey makes names the key st is compared by.
func (st *SourceTable) rekey(names []string) error {
	key := make([]*Column, len(names))
	for i, n := range names {
		if key[i] = st.Col(n); key[i] == nil {
			return fmt.Errorf("key column %q is not one of its columns", n)
		}
	}
	st.Key = key
	return nil
}

func (st *SourceTable) keyNames() []string {
	out := make([]string, len(st.Key))
	for i, c := range st.Key {
		out[i] = c.Name
	}
	return out
}

// KeyVals picks the key values out of a row's values.
func (st *SourceTable) KeyVals(vals []any) []any {
	out := make([]any, len(st.Key))
	for i, k := range st.Key {
		for j, c := range st.Cols {
			if c == k {
				out[i] = vals[j]
			}
		}
	}
	return out
}

// ChunkSum is the hash of one chunk: how many rows it holds and the sum of
// their row hashes (exact: the source's SQL sums bigints into a numeric or
// decimal). Sums are order-independent, so the source and silver can be
// read in any order.
type ChunkSum struct {
	N   int64
	Sum I128
}

// I128 is a two's-complement 128-bit integer, enough for 2^63 sums of
// int64s.
type I128 struct{ hi, lo uint64 }

func (u *I128) add(x int64) {
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

func (c *ChunkSum) add(d Digest) {
	c.N++
	c.Sum.add(rowHash(d))
}

func ParseI128(s string) (I128, error) {
	b, ok := new(big.Int).SetString(s, 10)
	if !ok || b.BitLen() > 127 {
		return I128{}, fmt.Errorf("bad chunk sum %q", s)
	}
	if b.Sign() < 0 {
		b.Add(b, new(big.Int).Lsh(big.NewInt(1), 128))
	}
	lo := new(big.Int).And(b, new(big.Int).SetUint64(math.MaxUint64)).Uint64()
	hi := new(big.Int).Rsh(b, 64).Uint64()
	return I128{hi: hi, lo: lo}, nil
}

// DecodeRow decodes raw text values of cols (nil: NULL).
func DecodeRow(cols []*Column, raw [][]byte) []any {
	vals := make([]any, len(cols))
	for i, c := range cols {
		if raw[i] == nil {
			continue
		}
		v, err := c.Decode(raw[i])
		if err != nil {
			vals[i] = undecodable{raw: string(raw[i])}
			continue
		}
		vals[i] = v
	}
	return vals
}

// CanonOf appends the canonical fields of vals (of cols) to buf.
func CanonOf(buf []byte, cols []*Column, vals []any) []byte {
	for i, c := range cols {
		buf = AppendField(buf, vals[i], c.Arrow)
	}
	return buf
}

// Fetched is a source row read by key, with an identity of its version:
// PostgreSQL's tuple version (xmin and ctid), which every UPDATE, DELETE
// and re-INSERT renews, so an unchanged identity between two snapshots
// proves the row was not touched in between; MySQL has none, and there it
// is the row's digest (an unchanged digest proves only that the row holds
// the same values: compare.go's rules still need silver's row older than
// the snapshot).
type Fetched struct {
	Vals []any
	TID  string
}

// ErrPushdown marks a failure of the chunk-hashing SQL.
var ErrPushdown = errors.New("chunk hashing at the source failed")

// sourceReader computes chunk hashes and drills into chunks, in SQL
// (pushdown) or by streaming the table's rows and hashing them in Go.
type sourceReader struct {
	st       *SourceTable
	n        int // chunks
	pushdown bool
}

func newSourceReader(s Snapshot, st *SourceTable, n int, pushdown bool) *sourceReader {
	return &sourceReader{st: st, n: n, pushdown: pushdown && s.Pushdown(st)}
}

// chunks returns every non-empty chunk's hash at the snapshot.
func (r *sourceReader) chunks(ctx context.Context, s Snapshot) (map[int]*ChunkSum, error) {
	if r.pushdown {
		return s.HashChunks(ctx, r.st, r.n)
	}
	out := map[int]*ChunkSum{}
	err := r.stream(ctx, s, func(key []byte, row Digest, _ []any) error {
		b := BucketOf(md5.Sum(key), r.n)
		c := out[b]
		if c == nil {
			c = &ChunkSum{}
			out[b] = c
		}
		c.add(row)
		return nil
	})
	return out, err
}

// drill calls fn with the key values, canonical key and row digest of every
// row in the given chunks.
func (r *sourceReader) drill(ctx context.Context, s Snapshot, chunks map[int]bool, fn func(keyVals []any, key string, row Digest) error) error {
	if r.pushdown {
		return s.DrillChunks(ctx, r.st, r.n, chunks, fn)
	}
	return r.stream(ctx, s, func(key []byte, row Digest, vals []any) error {
		if !chunks[BucketOf(md5.Sum(key), r.n)] {
			return nil
		}
		return fn(r.st.KeyVals(vals), string(key), row)
	})
}

// stream reads every row of the table at the snapshot and hashes it in Go.
func (r *sourceReader) stream(ctx context.Context, s Snapshot, fn func(key []byte, row Digest, vals []any) error) error {
	var kbuf, rbuf []byte
	return s.Scan(ctx, r.st, func(vals []any) error {
		kbuf = CanonOf(kbuf[:0], r.st.Key, r.st.KeyVals(vals))
		rbuf = CanonOf(rbuf[:0], r.st.Cols, vals)
		return fn(kbuf, md5.Sum(rbuf), vals)
	})
}

// qualifiedName is schema.table for messages.
func (st *SourceTable) String() string { return strings.Join([]string{st.Schema, st.Name}, ".") }

// CheckPushdown compares a source's HashChunks of n chunks with the sums
// the comparison computes without pushdown (Scan's rows, hashed in Go),
// and names every chunk where they differ. A source's tests check their
// SQL with it.
func CheckPushdown(ctx context.Context, s Snapshot, st *SourceTable, n int) error {
	inSQL, err := s.HashChunks(ctx, st, n)
	if err != nil {
		return err
	}
	inGo, err := newSourceReader(s, st, n, false).chunks(ctx, s)
	if err != nil {
		return err
	}
	var bad []string
	if len(inSQL) != len(inGo) {
		bad = append(bad, fmt.Sprintf("SQL found %d chunks, Go %d", len(inSQL), len(inGo)))
	}
	for b, c := range inGo {
		if q := inSQL[b]; q == nil || *q != *c {
			bad = append(bad, fmt.Sprintf("chunk %d: SQL %+v, Go %+v", b, q, c))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}
