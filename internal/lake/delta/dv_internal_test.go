package delta

import (
	"slices"
	"testing"
)

func TestDeletionVectorRoundTrip(t *testing.T) {
	for _, rows := range [][]uint64{
		{3, 4, 7, 11, 18, 29},
		{0},
		func() []uint64 { // a bitmap container, a second container, a second bucket
			var r []uint64
			for i := uint64(0); i < 5000; i++ {
				r = append(r, i*2)
			}
			return append(r, 70000, 1<<32|5)
		}(),
	} {
		dv := inlineDV(rows)
		got, err := dv.rows()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, rows) {
			t.Fatalf("round trip of %d rows gave %d", len(rows), len(got))
		}
	}
	// The protocol's inline example (rows 3, 4, 7, 11, 18, 29) decodes with
	// our Z85 to a bitmap whose 32-bit part is the one we write.
	b, err := z85Decode("wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L")
	if err != nil {
		t.Fatal(err)
	}
	vals, _, err := decodeRoaring32(b[12:])
	if err != nil || !slices.Equal(vals, []uint32{3, 4, 7, 11, 18, 29}) {
		t.Fatalf("protocol example: %v %v", vals, err)
	}
	if string(encodeRoaring32(vals)) != string(b[12:]) {
		t.Fatal("our 32-bit serialization differs from the protocol example's")
	}
	// A run container (cookie 12347).
	run := []byte{0x3b, 0x30, 0, 0, 1, 0, 0, 3, 0, 2, 0, 10, 0, 2, 0, 100, 0, 0, 0}
	vals, _, err = decodeRoaring32(run)
	if err != nil || !slices.Equal(vals, []uint32{10, 11, 12, 100}) {
		t.Fatalf("run container: %v %v", vals, err)
	}
}
