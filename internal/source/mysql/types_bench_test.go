package mysql_test

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// BenchmarkAppendText is the snapshot's decoding cost per value, for the
// common column types, into a chunk's builder.
func BenchmarkAppendText(b *testing.B) {
	for _, tc := range []struct{ name, columnType, charset, text string }{
		{"int", "int(11)", "", "123456"},
		{"bigint", "bigint(20)", "", "1234567890123"},
		{"varchar", "varchar(64)", "utf8mb4", "some customer name, héllo"},
		{"decimal", "decimal(12,2)", "", "12345678.91"},
		{"datetime", "datetime(6)", "", "2024-01-02 03:04:05.123456"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := mapping(&testing.T{}, tc.columnType, tc.charset)
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

// BenchmarkDecodeBinlog is the stream's decoding cost per value.
func BenchmarkDecodeBinlog(b *testing.B) {
	for _, tc := range []struct {
		name, columnType, charset string
		v                         any
	}{
		{"int", "int(11)", "", int32(123456)},
		{"varchar", "varchar(64)", "utf8mb4", "some customer name, héllo"},
		{"decimal", "decimal(12,2)", "", "12345678.91"},
		{"datetime", "datetime(6)", "", "2024-01-02 03:04:05.123456"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m := mapping(&testing.T{}, tc.columnType, tc.charset)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.DecodeBinlog(tc.v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
