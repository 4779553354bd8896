package mysql

import (
	"encoding/json"
	"fmt"

	"github.com/tidemark/tidemark/internal/coltype"
)

// ReasonValueTooLarge names, in a dead letter's error, a row with a value
// longer than max_value_bytes (the PostgreSQL source's name too).
const ReasonValueTooLarge = "value_too_large"

// A value's length, for max_value_bytes, is that of its lake form: a
// BLOB's bytes, a TEXT's UTF-8 bytes, a JSON document's normal text. The
// binlog and the snapshot's SELECT then agree on it whatever the column's
// character set. Where the bytes the source sends are the lake form (a
// binary string; text in utf8mb4 or ascii, and any text of the snapshot,
// which the server sends in utf8mb4) the length is checked before the
// value is decoded, so that a value over the maximum is never copied.

// rawIsLake reports whether the bytes the source sends for a value of m
// are its lake form, byte for byte: text is the snapshot's text protocol
// (utf8mb4), else the binlog (the column's own character set).
func (m *Mapping) rawIsLake(text bool) bool {
	switch m.k {
	case kBinary:
		return true
	case kText:
		return text || m.cs == csUTF8 || m.cs == csASCII
	}
	return false
}

// byteLen is the length of a string or byte slice (ok false for any
// other value: numbers, dates and times are short by their type).
func byteLen(v any) (int64, bool) {
	switch x := v.(type) {
	case string:
		return int64(len(x)), true
	case []byte:
		return int64(len(x)), true
	}
	return 0, false
}

// tooLarge is the error that makes a row whose value of column m is n
// bytes long a dead letter.
func (m *Mapping) tooLarge(n, max int64) error {
	return &coltype.ValueError{Column: m.name, Type: m.source,
		Reason: fmt.Sprintf("%s: the value is %d bytes, over max_value_bytes (%d); the dead letter's raw row leaves it out", ReasonValueTooLarge, n, max)}
}

// overRaw is the value_too_large error of raw value v (binlog or, with
// text, the snapshot's text) when its bytes are its lake form and longer
// than max (0: no maximum); nil otherwise, also when only the decoded
// value can tell (overDecoded).
func (m *Mapping) overRaw(v any, text bool, max int64) error {
	if max <= 0 || !m.rawIsLake(text) {
		return nil
	}
	if n, ok := byteLen(v); ok && n > max {
		return m.tooLarge(n, max)
	}
	return nil
}

// overDecoded is the value_too_large error of decoded value x when its
// raw form was not its lake form (overRaw did not look) and it is longer
// than max (0: no maximum).
func (m *Mapping) overDecoded(x any, text bool, max int64) error {
	if max <= 0 || m.rawIsLake(text) {
		return nil
	}
	if n, ok := byteLen(x); ok && n > max {
		return m.tooLarge(n, max)
	}
	return nil
}

// rawTextJSON renders a snapshot row's text for the dead-letter table,
// without the values longer than max (0: no maximum): the error of such a
// row names the column and its length, and the key stays. NULL is "".
func rawTextJSON(t *table, raw [][]byte, max int64) string {
	m := make(map[string]string, len(raw))
	for i, v := range raw {
		if i >= len(t.cols) || max > 0 && int64(len(v)) > max {
			continue
		}
		m[t.cols[i].Name] = string(v)
	}
	b, _ := json.Marshal(m)
	return string(b)
}
