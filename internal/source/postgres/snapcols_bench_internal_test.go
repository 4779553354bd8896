package postgres

import (
	"strconv"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
)

// BenchmarkColChunk decodes pgbench_accounts-shaped rows (int4, int4,
// int4, char(84)) into a chunk's Arrow arrays, as a snapshot chunk does.
func BenchmarkColChunk(b *testing.B) {
	rel := &Relation{Table: change.TableID{Schema: "public", Name: "pgbench_accounts"}, Columns: []Column{
		{Name: "aid", TypeOID: 23, TypeMod: -1}, {Name: "bid", TypeOID: 23, TypeMod: -1},
		{Name: "abalance", TypeOID: 23, TypeMod: -1}, {Name: "filler", TypeOID: 1042, TypeMod: 88},
	}}
	noLookup := func(oid uint32) (typemap.TypeInfo, error) {
		b.Fatalf("lookup of oid %d", oid)
		return typemap.TypeInfo{}, nil
	}
	if err := mapColumns(rel.Table, rel.Columns, noLookup, typemap.Options{}); err != nil {
		b.Fatal(err)
	}
	const rows = 10000
	raw := make([][][]byte, rows)
	filler := []byte(strings.Repeat(" ", 84))
	for i := range raw {
		raw[i] = [][]byte{[]byte(strconv.Itoa(i + 1)), []byte("1"), []byte("0"), filler}
	}
	hint := &sizeHint{}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N / rows {
		cc := newColChunk(rel, rows, hint)
		for _, r := range raw {
			if err := cc.add(r, 0); err != nil {
				b.Fatal(err)
			}
		}
		cols, _, err := cc.finish(hint)
		if err != nil {
			b.Fatal(err)
		}
		for _, a := range cols {
			a.Release()
		}
	}
}
