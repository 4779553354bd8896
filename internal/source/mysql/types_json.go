package mysql

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MySQL's json column (MariaDB's JSON is a longtext and is kept as text)
// reaches tidemark as two different texts of one document: SELECT gives
// MySQL's own rendering of its binary form, and the binlog gives go-mysql's
// (it decodes the binary form into Go values and marshals them, with Go's
// key order and spacing). Neither can be had from the other byte for byte,
// so jsonText reduces both to one normal form, MySQL's rendering as far as
// it is known: object keys in MySQL's storage order (shorter keys first,
// then by bytes), ", " and ": " between members, strings escaped as
// MySQL's double_quote does, integers as their digits, and other numbers
// as the shortest text that reads back to the same double, with ".0" on
// an integral one ("3.0", as MySQL prints a double 3). The value is never
// changed: only its spelling.
func jsonText(b []byte) (string, error) {
	if !utf8.Valid(b) {
		return "", errNotUTF8
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "", errors.New("malformed JSON")
	}
	if _, err := d.Token(); err == nil {
		return "", errors.New("malformed JSON: more than one value")
	}
	var sb strings.Builder
	sb.Grow(len(b) + len(b)/8)
	if err := writeJSON(&sb, v); err != nil {
		return "", err
	}
	return sb.String(), nil
}

func writeJSON(sb *strings.Builder, v any) error {
	switch x := v.(type) {
	case nil:
		sb.WriteString("null")
	case bool:
		sb.WriteString(strconv.FormatBool(x))
	case string:
		jsonQuote(sb, x)
	case json.Number:
		s, err := jsonNumber(string(x))
		if err != nil {
			return err
		}
		sb.WriteString(s)
	case []any:
		sb.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				sb.WriteString(", ")
			}
			if err := writeJSON(sb, e); err != nil {
				return err
			}
		}
		sb.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			if len(keys[i]) != len(keys[j]) {
				return len(keys[i]) < len(keys[j])
			}
			return keys[i] < keys[j]
		})
		sb.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				sb.WriteString(", ")
			}
			jsonQuote(sb, k)
			sb.WriteString(": ")
			if err := writeJSON(sb, x[k]); err != nil {
				return err
			}
		}
		sb.WriteByte('}')
	default:
		return errors.New("malformed JSON")
	}
	return nil
}

// jsonNumber spells a number: an integer (MySQL's int64 and uint64) as
// its digits, anything else (a double) as the shortest text of its double.
func jsonNumber(s string) (string, error) {
	if !strings.ContainsAny(s, ".eE") {
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return s, nil
		}
		if _, err := strconv.ParseUint(s, 10, 64); err == nil {
			return s, nil
		}
		// Beyond 64 bits MySQL stores a double.
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return "", errors.New("JSON number out of range for a double")
	}
	out := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(out, ".e") {
		out += ".0"
	}
	return out, nil
}

// jsonQuote writes s as MySQL's double_quote does: \" \\ \b \f \n \r \t,
// other ASCII control characters (and DEL) as \u00xx, everything else as
// it is.
func jsonQuote(sb *strings.Builder, s string) {
	const hexDigits = "0123456789abcdef"
	sb.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"', '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		default:
			if c < 0x20 || c == 0x7f {
				sb.WriteString(`\u00`)
				sb.WriteByte(hexDigits[c>>4])
				sb.WriteByte(hexDigits[c&0xf])
				continue
			}
			sb.WriteByte(c)
		}
	}
	sb.WriteByte('"')
}
