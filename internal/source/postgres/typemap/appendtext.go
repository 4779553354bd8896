package typemap

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/coltype"
)

// appendFunc decodes one value's text straight into a builder of its
// kind's Arrow type, without the boxed value Decode returns. Its errors are
// reasons, as decodeFunc's; errWrongBuilder says the builder is not of
// the kind's type (AppendText then takes the Decode path).
type appendFunc func(b array.Builder, text []byte) error

var errWrongBuilder = errors.New("typemap: builder of another type")

// boxed turns a typed parser into a decodeFunc.
func boxed[T any](parse func([]byte) (T, error)) decodeFunc {
	return func(text []byte) (any, error) {
		v, err := parse(text)
		if err != nil {
			return nil, err
		}
		return v, nil
	}
}

// appender is an Arrow builder of T values.
type appender[T any] interface {
	array.Builder
	Append(T)
}

// appendWith turns a typed parser into an appendFunc for builders of B.
func appendWith[T any, B appender[T]](parse func([]byte) (T, error)) appendFunc {
	return func(b array.Builder, text []byte) error {
		bb, ok := b.(B)
		if !ok {
			return errWrongBuilder
		}
		v, err := parse(text)
		if err != nil {
			return err
		}
		bb.Append(v)
		return nil
	}
}

// scalarKind is the kind of a built-in scalar read by parse into builders
// of B.
func scalarKind[T any, B appender[T]](source string, ice iceberg.Type, at arrow.DataType, parse func([]byte) (T, error)) kind {
	return kind{source: source, ice: ice, arrow: at, dec: boxed(parse), app: appendWith[T, B](parse)}
}

// appendString is decodeString straight into a string builder.
func appendString(b array.Builder, text []byte) error {
	sb, ok := b.(*array.StringBuilder)
	if !ok {
		return errWrongBuilder
	}
	if !utf8.Valid(text) {
		return errNotUTF8
	}
	sb.BinaryBuilder.Append(text)
	return nil
}

// appendDecimal is a decimal parser straight into a decimal builder, which
// refuses a value with more digits than the builder's precision, as
// AppendValue does.
func appendDecimal(parse func([]byte) (decimal128.Num, error)) appendFunc {
	return func(b array.Builder, text []byte) error {
		db, ok := b.(*array.Decimal128Builder)
		if !ok {
			return errWrongBuilder
		}
		x, err := parse(text)
		if err != nil {
			return err
		}
		if p := db.Type().(*arrow.Decimal128Type).Precision; !x.FitsInPrecision(p) {
			return errWrongBuilder // AppendValue's error, from the Decode path
		}
		db.Append(x)
		return nil
	}
}

// AppendText appends the value of PostgreSQL's text output (nil: SQL NULL)
// to b, a builder of the Mapping's ArrowType: what coltype.AppendValue(b, v) does
// with v, err := Decode(text), without the boxed value. A value with no
// exact representation returns the *coltype.ValueError Decode returns, and appends
// nothing; any other error is AppendValue's (a builder of another type),
// after which b may hold part of a list: discard it. A pointer receiver:
// a snapshot chunk calls it once per value, and copying the Mapping each
// time was a tenth of the chunk's decoding.
func (m *Mapping) AppendText(b array.Builder, text []byte) error {
	if text == nil {
		b.AppendNull()
		return nil
	}
	if m.k.app != nil {
		err := m.k.app(b, text)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errWrongBuilder) {
			return &coltype.ValueError{Column: m.column, Type: m.k.source, Reason: err.Error()}
		}
	}
	v, err := m.Decode(text)
	if err != nil {
		return err
	}
	if err := coltype.AppendValue(b, v); err != nil {
		return fmt.Errorf("column %q: %w", m.column, err)
	}
	return nil
}
