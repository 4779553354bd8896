package typemap

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/decimal128"

	"github.com/tidemark/tidemark/internal/coltype"
)

// Errors are reasons only: they never quote the value.
var (
	errMalformed = errors.New("malformed text")
	errRange     = errors.New("out of range")
)

// smallInt reads PostgreSQL's output of an integer, [-]digits, when it has
// at most 18 digits (so it cannot overflow int64); ok is false for
// anything else, which the caller hands to strconv for its exact errors.
func smallInt(text []byte) (v int64, ok bool) {
	d := text
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 18 {
		return 0, false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if len(d) < len(text) {
		v = -v
	}
	return v, true
}

func parseInt32(text []byte) (int32, error) {
	if v, ok := smallInt(text); ok && v >= math.MinInt32 && v <= math.MaxInt32 {
		return int32(v), nil
	}
	v, err := strconv.ParseInt(string(text), 10, 32)
	if err != nil {
		return 0, numErr(err)
	}
	return int32(v), nil
}

func parseInt64(text []byte) (int64, error) {
	if v, ok := smallInt(text); ok {
		return v, nil
	}
	v, err := strconv.ParseInt(string(text), 10, 64)
	if err != nil {
		return 0, numErr(err)
	}
	return v, nil
}

// parseUint32 reads oid, xid and cid: unsigned 32-bit, stored as long.
func parseUint32(text []byte) (int64, error) {
	v, err := strconv.ParseUint(string(text), 10, 32)
	if err != nil {
		return 0, numErr(err)
	}
	return int64(v), nil
}

// parseUint63 reads xid8: unsigned 64-bit, stored as long. Values above
// 2^63-1 (an epoch beyond 2^31) are refused rather than wrapped.
func parseUint63(text []byte) (int64, error) {
	v, err := strconv.ParseUint(string(text), 10, 63)
	if err != nil {
		return 0, numErr(err)
	}
	return int64(v), nil
}

// Float text under extra_float_digits=3 is the shortest text that reads
// back to the same bits; PostgreSQL spells the specials NaN, Infinity and
// -Infinity, which ParseFloat accepts. "-0" keeps its sign.
func parseFloat32(text []byte) (float32, error) {
	v, err := strconv.ParseFloat(string(text), 32)
	if err != nil {
		return 0, numErr(err)
	}
	return float32(v), nil
}

func parseFloat64(text []byte) (float64, error) {
	v, err := strconv.ParseFloat(string(text), 64)
	if err != nil {
		return 0, numErr(err)
	}
	return v, nil
}

func numErr(err error) error {
	if errors.Is(err, strconv.ErrRange) {
		return errRange
	}
	return errMalformed
}

func parseBool(text []byte) (bool, error) {
	switch string(text) {
	case "t":
		return true, nil
	case "f":
		return false, nil
	}
	return false, errMalformed
}

var errNotUTF8 = errors.New("text is not valid UTF-8")

// decodeString keeps the text exactly; it only insists on UTF-8, which
// Iceberg strings require (a SQL_ASCII database can hold anything).
func decodeString(text []byte) (any, error) {
	if !utf8.Valid(text) {
		return nil, errNotUTF8
	}
	return string(text), nil
}

// parseBytea reads bytea_output=hex: `\x` then two hex digits a byte.
func parseBytea(text []byte) ([]byte, error) {
	if len(text) < 2 || text[0] != '\\' || text[1] != 'x' {
		return nil, errors.New("bytea text is not in hex format (bytea_output=hex)")
	}
	out := make([]byte, hex.DecodedLen(len(text)-2))
	if _, err := hex.Decode(out, text[2:]); err != nil {
		return nil, errMalformed
	}
	return out, nil
}

// decimalParser reads numeric text into decimal(p,s) exactly: never
// rounds, never truncates. NaN and ±Infinity have no decimal form.
func decimalParser(p, s int32) func([]byte) (decimal128.Num, error) {
	return func(text []byte) (decimal128.Num, error) {
		switch string(text) {
		case "NaN", "Infinity", "-Infinity":
			return decimal128.Num{}, fmt.Errorf("%s is not representable in decimal(%d,%d)", text, p, s)
		}
		v, err := coltype.ParseDecimal(text, p, s)
		if err == coltype.ErrDecimalSyntax {
			err = errMalformed
		}
		return v, err
	}
}

// Sentinels for PostgreSQL's infinite dates and timestamps: the same
// extremes PostgreSQL itself uses internally for them.
const (
	dateInfinity    = math.MaxInt32
	dateNegInfinity = math.MinInt32
	tsInfinity      = math.MaxInt64
	tsNegInfinity   = math.MinInt64
)
