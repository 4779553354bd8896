package typemap_test

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
)

// BenchmarkAppendText is the decoding cost per value, for the common
// column types, into a chunk's builder (the snapshot's and the stream's
// path).
func BenchmarkAppendText(b *testing.B) {
	for _, tc := range []struct {
		name   string
		oid    uint32
		typmod int32
		text   string
	}{
		{"int4", pgtype.Int4OID, -1, "123456"},
		{"int8", pgtype.Int8OID, -1, "1234567890123"},
		{"text", pgtype.TextOID, -1, "some customer name, héllo"},
		{"numeric", pgtype.NumericOID, numMod(12, 2), "12345678.91"},
		{"numeric38", pgtype.NumericOID, numMod(38, 10), "1234567890123456789012345678.0123456789"},
		{"timestamptz", pgtype.TimestamptzOID, -1, "2024-01-02 03:04:05.123456+00"},
		{"int4[]", pgtype.Int4ArrayOID, -1, "{1,2,3,NULL,5}"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m, err := typemap.Map(typemap.Column{Name: "c", TypeOID: tc.oid, TypeMod: tc.typmod}, fakeLookup)
			if err != nil {
				b.Fatal(err)
			}
			bld := array.NewBuilder(memory.DefaultAllocator, m.ArrowType())
			defer bld.Release()
			text := []byte(tc.text)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := m.AppendText(bld, text); err != nil {
					b.Fatal(err)
				}
				if i%8192 == 8191 {
					bld.NewArray().Release()
				}
			}
		})
	}
}
