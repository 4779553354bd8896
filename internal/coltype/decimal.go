package coltype

import (
	"errors"
	"fmt"
	"math/big"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
)

// ErrDecimalSyntax is ScanDecimal's error for text that is not
// [-+]digits[.digits]; a source words it as its other malformed values.
var ErrDecimalSyntax = errors.New("malformed decimal text")

// ScanDecimal reads decimal text, [-+]digits[.digits] (digits on at least
// one side of the point), as the unscaled value of a decimal(p,s) exactly:
// never rounding, never truncating. It appends the unscaled digits, without
// leading zeros (none for zero), to dst and returns them with the sign (a
// negative zero is zero). Fractional digits beyond s are allowed only when
// they are zeros. Its errors are reasons that name no value: more than p
// significant digits, a nonzero digit beyond s, or ErrDecimalSyntax.
//
// Pass a stack array as dst (var buf [40]byte; buf[:0]) to read without
// allocating: p is at most 38 for a decimal128.
func ScanDecimal[T ~string | ~[]byte](dst []byte, text T, p, s int32) (neg bool, digits []byte, err error) {
	i := 0
	if i < len(text) && (text[i] == '-' || text[i] == '+') {
		neg = text[i] == '-'
		i++
	}
	digits = dst
	nint, nfrac, sawDot := 0, 0, false
	for ; i < len(text); i++ {
		c := text[i]
		switch {
		case c >= '0' && c <= '9':
			if sawDot {
				nfrac++
				if nfrac > int(s) {
					if c != '0' {
						return false, nil, fmt.Errorf("more fractional digits than scale %d", s)
					}
					continue
				}
			} else {
				nint++
			}
			if len(digits) == len(dst) && c == '0' {
				continue
			}
			digits = append(digits, c)
			if len(digits)-len(dst) > int(p) {
				return false, nil, fmt.Errorf("more than %d significant digits for decimal(%d,%d)", p, p, s)
			}
		case c == '.' && !sawDot:
			sawDot = true
		default:
			return false, nil, ErrDecimalSyntax
		}
	}
	if nint+nfrac == 0 {
		return false, nil, ErrDecimalSyntax
	}
	if len(digits) > len(dst) {
		for f := min(nfrac, int(s)); f < int(s); f++ {
			digits = append(digits, '0')
			if len(digits)-len(dst) > int(p) {
				return false, nil, fmt.Errorf("more than %d significant digits for decimal(%d,%d)", p, p, s)
			}
		}
	}
	digits = digits[len(dst):]
	return neg && len(digits) > 0, digits, nil
}

// DecimalOf is the decimal128 of the unscaled digits ScanDecimal returns.
func DecimalOf(neg bool, digits []byte) (decimal128.Num, error) {
	if len(digits) <= 18 {
		var u int64
		for _, c := range digits {
			u = u*10 + int64(c-'0')
		}
		if neg {
			u = -u
		}
		return decimal128.FromI64(u), nil
	}
	b, ok := new(big.Int).SetString(string(digits), 10)
	if !ok {
		return decimal128.Num{}, ErrDecimalSyntax
	}
	if neg {
		b.Neg(b)
	}
	return decimal128.FromBigInt(b), nil
}

// ParseDecimal is ScanDecimal then DecimalOf: decimal text as the
// decimal128.Num of a decimal(p,s) column, exactly.
func ParseDecimal[T ~string | ~[]byte](text T, p, s int32) (decimal128.Num, error) {
	var buf [40]byte
	neg, digits, err := ScanDecimal(buf[:0], text, p, s)
	if err != nil {
		return decimal128.Num{}, err
	}
	return DecimalOf(neg, digits)
}
