package myverify

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/source/mysql"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/verify"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// TestMySQLCanonMatchesGo checks the MySQL canonical forms (myCanon)
// against canon.go's of the values Mapping.DecodeText gives, column by
// column, whole rows (MD5), chunks and key lookups, on a real MariaDB.
func TestMySQLCanonMatchesGo(t *testing.T) {
	m := testenv.SharedMariaDB(t)
	dbname := m.CreateDB(t, "mycanon")
	m.ExecIn(t, dbname, `CREATE TABLE canon (k varchar(20) PRIMARY KEY, i int, iu int unsigned, bi bigint, u bigint unsigned, ti tinyint,
		b bit(5), b64 bit(64), y year, d date, dt datetime(6), ts timestamp(3) NULL, bin varbinary(10), fb binary(3), e enum('x','y'),
		s set('a','b','c'), t text CHARACTER SET latin1, t2 varchar(10) CHARACTER SET utf8mb3, big decimal(38,10), small decimal(5,2),
		ch char(4), uu uuid, ip inet6)`)
	m.ExecIn(t, dbname, `INSERT INTO canon VALUES
		('a', -2147483648, 4294967295, -9223372036854775808, 18446744073709551615, -128, b'10101', b'1111111111111111111111111111111111111111111111111111111111111111',
		 2024, '2024-02-29', '1000-01-01 00:00:00.000001', '2024-01-01 12:00:00.125', x'00ff10', x'0102', 'y', 'a,c', 'café', 'naïve',
		 -1234567890123456789012345678.0123456789, -0.50, 'ab', '123e4567-e89b-12d3-a456-426614174000', '::ffff:1.2.3.4'),
		('B', 0, 0, 0, 0, 0, b'0', b'0', 1901, '1970-01-01', '1969-12-31 23:59:59.999999', '1970-01-01 00:00:01.000', '', x'000000', 'x', '', '', '',
		 0, 0, '', '00000000-0000-0000-0000-000000000000', '::'),
		('c', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		('d é', 1, 1, 1, 1, 1, b'11111', b'1', 2155, '9999-12-31', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999', x'ff', x'ffffff', 'x', 'b', 'x', '€',
		 0.5, 999.99, 'abcd', NULL, '2001:db8::1')`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := mysql.Options{Host: m.Host, Port: m.Port, User: m.User, Password: m.Password, Database: dbname}.DSN()
	src, err := New(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	s0, err := src.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s0.Close()
	snap := s0.(*mySnap)
	st, err := snap.Describe(ctx, verify.TableName{Schema: dbname, Table: "canon"})
	if err != nil || st == nil {
		t.Fatalf("describe: %v, %v", st, err)
	}
	if !snap.Pushdown(st) {
		t.Fatal("no pushdown for the table")
	}
	var exprs []string
	for _, c := range st.Cols {
		cn, ok := myCanon(c)
		if !ok {
			t.Fatalf("column %s: no SQL canonical form", c.Name)
		}
		exprs = append(exprs, cn)
	}
	rowSQL, _ := myFields(st.Cols)
	keySQL, _ := myFields(st.Key)
	const chunks = 7
	q := fmt.Sprintf("SELECT %s, %s, MD5(%s), %s FROM canon ORDER BY k", mySelectList(st.Cols), strings.Join(exprs, ", "), rowSQL, myBucket(keySQL, chunks))
	n := len(st.Cols)
	seen := 0
	err = snap.query(ctx, "canon", q, nil, func(raw [][]byte) error {
		vals := verify.DecodeRow(st.Cols, raw[:n])
		id := string(raw[0])
		for i, c := range st.Cols {
			if vals[i] == nil {
				continue
			}
			if _, err := c.Decode(raw[i]); err != nil {
				t.Errorf("row %s column %s: DecodeText refused %q", id, c.Name, raw[i])
				continue
			}
			goText := string(verify.AppendCanon(nil, vals[i], c.Arrow))
			if sqlText := string(raw[n+i]); goText != sqlText {
				t.Errorf("row %s column %s (%s): SQL canonical %q, Go %q", id, c.Name, myNative(c).c.ColumnType, sqlText, goText)
			}
		}
		sum := md5.Sum(verify.CanonOf(nil, st.Cols, vals))
		if got, want := string(raw[2*n]), hex.EncodeToString(sum[:]); got != want {
			t.Errorf("row %s: SQL md5 %s, Go %s", id, got, want)
		}
		if got, want := string(raw[2*n+1]), fmt.Sprint(verify.BucketOf(md5.Sum(verify.CanonOf(nil, st.Key, st.KeyVals(vals))), chunks)); got != want {
			t.Errorf("row %s: SQL chunk %s, Go %s", id, got, want)
		}
		seen++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != 4 {
		t.Fatalf("read %d rows, want 4", seen)
	}

	// Chunk sums agree too.
	if err := verify.CheckPushdown(ctx, snap, st, chunks); err != nil {
		t.Error(err)
	}

	// Keys read back by lookup, exactly: "b" is not "B" under the
	// case-insensitive collation.
	got, err := snap.Fetch(ctx, st, [][]any{{"a"}, {"d é"}, {"b"}, {"zz"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("fetched %d rows, want 2: %v", len(got), got)
	}
}
