package silver

import (
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestTxTimesDistinct: each transaction is counted once, whatever the
// order of the files it is read from and however its rows are split
// between them.
func TestTxTimesDistinct(t *testing.T) {
	b := array.NewTimestampBuilder(memory.DefaultAllocator, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"})
	defer b.Release()
	for _, v := range []int64{10, 10, 20, 30, 30} {
		b.Append(arrow.Timestamp(v))
	}
	b.AppendNull()
	ts := b.NewTimestampArray()
	defer ts.Release()
	var tx txTimes
	// File 2 first: the end of transaction 2 and transaction 3.
	tx.note(200, ts, 2)
	tx.note(300, ts, 3)
	tx.note(300, ts, 4)
	// File 1: transaction 1, the start of 2, and a row without cdc_ts.
	tx.note(100, ts, 0)
	tx.note(100, ts, 1)
	tx.note(200, ts, 2)
	tx.note(400, ts, 5)
	if got, want := tx.distinct(), []int64{10, 20, 30}; !slices.Equal(got, want) {
		t.Errorf("distinct = %v, want %v", got, want)
	}
}
