package typemap_test

import (
	"errors"
	"fmt"
	"math"
	"reflect"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/coltype"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
)

// checkAppendText reports how AppendText(text) differs from what Decode
// gave for the same text (v, decErr) followed by AppendValue: the same
// value in the array, bit for bit, or the same ValueError and nothing
// appended.
func checkAppendText(m typemap.Mapping, text []byte, v any, decErr error) error {
	b := array.NewBuilder(memory.DefaultAllocator, m.ArrowType())
	defer b.Release()
	err := m.AppendText(b, text)
	if decErr != nil {
		var want, got *coltype.ValueError
		if !errors.As(decErr, &want) || !errors.As(err, &got) || *want != *got {
			return fmt.Errorf("AppendText error %v, Decode error %v", err, decErr)
		}
		if b.Len() != 0 {
			return fmt.Errorf("AppendText failed but appended %d values", b.Len())
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("AppendText: %v (Decode: %s)", err, render(v, m.ArrowType()))
	}
	arr := b.NewArray()
	defer arr.Release()
	if arr.Len() != 1 {
		return fmt.Errorf("AppendText appended %d values", arr.Len())
	}
	got := valueAt(arr, 0)
	if !sameValue(got, v) {
		return fmt.Errorf("AppendText appended %s, Decode gave %s", render(got, m.ArrowType()), render(v, m.ArrowType()))
	}
	return nil
}

// sameValue compares decoded values, floats by their bits.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float32:
		y, ok := b.(float32)
		return ok && math.Float32bits(x) == math.Float32bits(y)
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case []byte:
		y, ok := b.([]byte)
		return ok && string(x) == string(y)
	}
	return reflect.DeepEqual(a, b)
}
