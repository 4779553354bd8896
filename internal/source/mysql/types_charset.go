package mysql

import (
	"errors"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// charset is a character set the binlog decoder reads. The binlog holds a
// text column's bytes in the column's own character set; the text protocol
// converts them to utf8mb4 (SessionVariables), and toUTF8 does the same
// for binlog values.
type charset uint8

const (
	csUTF8    charset = iota // utf8mb4, utf8mb3: checked, kept
	csASCII                  // checked, kept
	csLatin1                 // MySQL's latin1 is Windows-1252
	csUCS2                   // big-endian UCS-2
	csUTF16                  // big-endian UTF-16
	csUTF16LE                // little-endian UTF-16
	csUTF32                  // big-endian UTF-32
	csBinary                 // bytes: the column is binary
)

func charsetOf(name string) (charset, bool) {
	switch strings.ToLower(name) {
	case "utf8mb4", "utf8mb3", "utf8":
		return csUTF8, true
	case "ascii":
		return csASCII, true
	case "latin1":
		return csLatin1, true
	case "ucs2":
		return csUCS2, true
	case "utf16":
		return csUTF16, true
	case "utf16le":
		return csUTF16LE, true
	case "utf32":
		return csUTF32, true
	case "binary":
		return csBinary, true
	}
	return 0, false
}

var (
	errNotUTF8      = errors.New("text is not valid UTF-8")
	errNotInCharset = errors.New("text is not valid in the column's character set")
)

// cp1252 holds the characters of MySQL's latin1 at 0x80..0x9F, which are
// Windows-1252's; the five code points Windows-1252 leaves undefined map
// to the C1 controls, as MySQL converts them. 0xA0..0xFF are ISO 8859-1.
var cp1252 = [32]rune{
	0x20AC, 0x0081, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021,
	0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0x008D, 0x017D, 0x008F,
	0x0090, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
	0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x009D, 0x017E, 0x0178,
}

// toUTF8 converts b from cs into a new UTF-8 string (never aliasing b).
func toUTF8(cs charset, b []byte) (string, error) {
	switch cs {
	case csUTF8:
		if !utf8.Valid(b) {
			return "", errNotUTF8
		}
		return string(b), nil
	case csASCII:
		for _, c := range b {
			if c >= 0x80 {
				return "", errNotInCharset
			}
		}
		return string(b), nil
	case csLatin1:
		ascii := true
		for _, c := range b {
			if c >= 0x80 {
				ascii = false
				break
			}
		}
		if ascii {
			return string(b), nil
		}
		var sb strings.Builder
		sb.Grow(len(b) + len(b)/2)
		for _, c := range b {
			switch {
			case c < 0x80:
				sb.WriteByte(c)
			case c < 0xA0:
				sb.WriteRune(cp1252[c-0x80])
			default:
				sb.WriteRune(rune(c))
			}
		}
		return sb.String(), nil
	case csUCS2, csUTF16, csUTF16LE:
		if len(b)%2 != 0 {
			return "", errNotInCharset
		}
		u := make([]uint16, len(b)/2)
		for i := range u {
			if cs == csUTF16LE {
				u[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
			} else {
				u[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
			}
		}
		var sb strings.Builder
		for i := 0; i < len(u); i++ {
			r := rune(u[i])
			switch {
			case utf16.IsSurrogate(r) && cs == csUCS2:
				return "", errNotInCharset
			case utf16.IsSurrogate(r):
				if i+1 >= len(u) {
					return "", errNotInCharset
				}
				r = utf16.DecodeRune(r, rune(u[i+1]))
				if r == utf8.RuneError {
					return "", errNotInCharset
				}
				i++
			}
			sb.WriteRune(r)
		}
		return sb.String(), nil
	case csUTF32:
		if len(b)%4 != 0 {
			return "", errNotInCharset
		}
		var sb strings.Builder
		for i := 0; i < len(b); i += 4 {
			r := rune(uint32(b[i])<<24 | uint32(b[i+1])<<16 | uint32(b[i+2])<<8 | uint32(b[i+3]))
			if !utf8.ValidRune(r) {
				return "", errNotInCharset
			}
			sb.WriteRune(r)
		}
		return sb.String(), nil
	}
	return string(b), nil
}
