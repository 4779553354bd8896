package mysql

import (
	"database/sql"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/change"
)

// maxTable is a table with an int key, a longblob, a utf8mb4 longtext and a
// latin1 text (whose binlog bytes are shorter than its lake form).
func maxTable(t *testing.T) *table {
	t.Helper()
	c := func(name, dt, ct, cs string) Column {
		return Column{Schema: "shop", Table: "t", Name: name, DataType: dt, ColumnType: ct, Charset: cs}
	}
	tb, err := (&Capture{}).tableOf(nil, change.TableID{Schema: "shop", Name: "t"}, []Column{
		c("id", "int", "int(11)", ""),
		c("b", "longblob", "longblob", "binary"),
		c("t", "longtext", "longtext", "utf8mb4"),
		c("l", "text", "text", "latin1"),
	}, []string{"id"})
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// TestMaxValueBinlogRow: a binlog row with a value over max_value_bytes
// (its lake form: a latin1 text measured in UTF-8) is a value_too_large
// error naming the column; a delete's or old row's value over it is left
// out and named, the key never; the dead letter's raw row leaves it out.
func TestMaxValueBinlogRow(t *testing.T) {
	tb := maxTable(t)
	s := &stream{c: &Capture{opts: Options{MaxValueBytes: 8}}}
	for _, tc := range []struct {
		name    string
		row     []any
		omit    bool
		wantErr string // "" : none
		omitted string
	}{
		{"within", []any{int32(1), []byte("12345678"), "abcdefgh", "\xe9"}, false, "", ""},
		{"blob over", []any{int32(1), []byte("123456789"), "a", nil}, false, `column "b" (longblob): value_too_large: the value is 9 bytes, over max_value_bytes (8)`, ""},
		{"text over", []any{int32(1), nil, "123456789", nil}, false, `column "t" (longtext): value_too_large: the value is 9 bytes`, ""},
		// 5 latin1 bytes, 10 bytes of UTF-8 (é is 2 bytes): over.
		{"latin1 over in UTF-8", []any{int32(1), nil, nil, "\xe9\xe9\xe9\xe9\xe9"}, false, `column "l" (text): value_too_large: the value is 10 bytes`, ""},
		{"delete leaves out", []any{int32(1), []byte("123456789"), "x", "\xe9\xe9\xe9\xe9\xe9"}, true, "", "b,l"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals, omitted, err := s.decodeRow(tb, tc.row, tc.omit)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if got := strings.Join(omitted, ","); got != tc.omitted {
				t.Errorf("left out %q, want %q", got, tc.omitted)
			}
			for _, name := range omitted {
				if i := slices.Index(tb.names(), name); vals[i] != nil {
					t.Errorf("left-out column %s has value %v", name, vals[i])
				}
			}
			var raw map[string]any
			if err := json.Unmarshal([]byte(rawJSON(tb, tc.row, 8)), &raw); err != nil {
				t.Fatal(err)
			}
			if _, ok := raw["id"]; !ok {
				t.Errorf("raw %v has no key", raw)
			}
			for i, v := range tc.row {
				if n, ok := byteLen(v); ok && n > 8 {
					if _, ok := raw[tb.cols[i].Name]; ok {
						t.Errorf("raw %v holds the value of %s, over the maximum", raw, tb.cols[i].Name)
					}
				}
			}
		})
	}
	// The key is never left out: a delete whose key is over the maximum
	// is an error (and a dead letter), not a row without a key.
	ks := &stream{c: &Capture{opts: Options{MaxValueBytes: 1}}}
	kt := maxTable(t)
	kt.keyIdx = []int{2}
	if _, _, err := ks.decodeRow(kt, []any{int32(1), nil, "long key", nil}, true); err == nil {
		t.Errorf("a delete whose key value is over the maximum: no error")
	}
}

// TestMaxValueSnapshotRow: a snapshot row with a value over the maximum is
// a dead letter whose raw text leaves the value out and keeps the key.
func TestMaxValueSnapshotRow(t *testing.T) {
	tb := maxTable(t)
	raw := []sql.RawBytes{sql.RawBytes("7"), sql.RawBytes(strings.Repeat("x", 9)), sql.RawBytes("ok"), nil}
	r := decodeSnapRow(tb, raw, 8)
	if r.err == nil || !strings.Contains(r.err.Error(), `column "b" (longblob): value_too_large: the value is 9 bytes, over max_value_bytes (8)`) {
		t.Fatalf("error %v, want value_too_large of b", r.err)
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(r.raw), &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["b"]; ok || m["id"] != "7" || m["t"] != "ok" {
		t.Errorf("raw %v: want id and t, not b", m)
	}
	if r := decodeSnapRow(tb, raw, 9); r.err != nil {
		t.Errorf("a value of exactly the maximum: %v", r.err)
	}
	if r := decodeSnapRow(tb, raw, 0); r.err != nil {
		t.Errorf("no maximum: %v", r.err)
	}
}
