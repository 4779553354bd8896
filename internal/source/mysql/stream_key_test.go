package mysql

import (
	"fmt"
	"math/big"
	"testing"
)

// TestKeyOfMatchesFmt: keyOf's fast path writes what fmt's "%T:%v" did, so
// keys of snapshot rows and binlog changes compare as before, and sameKey
// agrees with comparing keyOf.
func TestKeyOfMatchesFmt(t *testing.T) {
	tb := &table{keyIdx: []int{0, 2}}
	rows := [][]any{
		{int64(-42), "x", "a\x00b"},
		{uint64(18446744073709551615), nil, int32(7)},
		{[]byte("raw"), 1, big.NewInt(12)},
		{nil, 1, "z"},
		{int64(-42), "y", "a\x00b"},
	}
	for _, r := range rows {
		want := ""
		for _, i := range tb.keyIdx {
			want += fmt.Sprintf("%T:%v\x00", r[i], r[i])
		}
		if got := keyOf(tb, r); got != want {
			t.Errorf("keyOf(%v) = %q, want %q", r, got, want)
		}
	}
	for _, a := range rows {
		for _, b := range rows {
			if got, want := sameKey(tb, a, b), keyOf(tb, a) == keyOf(tb, b); got != want {
				t.Errorf("sameKey(%v, %v) = %v, keyOf says %v", a, b, got, want)
			}
		}
	}
}
