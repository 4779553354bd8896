package bronze

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
)

// This file records what rows written before a column existed hold in it.
//
// `ALTER TABLE t ADD COLUMN c … DEFAULT <constant>` on PostgreSQL 11+
// rewrites nothing: the existing rows read the default from the catalog
// (the column's missing value) and the WAL carries no change for them. So
// when the bronze table gains a column that has a missing value, the same
// metadata commit records it in the table property PropDefaults with the
// bronze snapshot that was current then: every row that snapshot holds was
// written without the column and reads that value (bronze keeps NULL in
// them: it is append-only). Rows written after the column was added hold
// their value themselves: a row decoded under the table's old layout (the
// stream replaying changes from before the ALTER, after a restart) gets the
// missing value written into it, until the first row that carries the
// column. Silver applies the same rule (internal/silver/defaults.go).

// PropDefaults is the table property that records, per column, the value
// rows written before the column existed read (JSON object, see Default).
const PropDefaults = "tidemark.defaults"

// Default is one column's entry of PropDefaults.
type Default struct {
	// Value is the value in the JSON form Arrow's JSON reader takes for the
	// column's Arrow type (array.FromJSON): a number, string or boolean;
	// decimals, dates, times and timestamps as strings; binary as base64.
	Value json.RawMessage `json:"value"`
	// Text is the source's text of the value (for people).
	Text string `json:"text"`
	// Snapshot is the bronze snapshot current when the column was added
	// (lake.NoSnapshot: none). The rows it holds read Value.
	Snapshot int64 `json:"snapshot"`
}

// Defaults parses a table's PropDefaults (empty: none).
func Defaults(props map[string]string) (map[string]Default, error) {
	raw := props[PropDefaults]
	if raw == "" {
		return nil, nil
	}
	var out map[string]Default
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fault.With(fault.ErrCorruptState, fmt.Sprintf("table property %s is unreadable", PropDefaults), err)
	}
	return out, nil
}

// DefaultArray returns d's value as a one-row Arrow array of type dt.
func DefaultArray(mem memory.Allocator, dt arrow.DataType, d Default) (arrow.Array, error) {
	arr, _, err := array.FromJSON(mem, dt, strings.NewReader("["+string(d.Value)+"]"))
	if err != nil {
		return nil, fmt.Errorf("read default value %s as %s: %w", d.Value, dt, err)
	}
	if arr.Len() != 1 {
		arr.Release()
		return nil, fmt.Errorf("default value %s is not one value", d.Value)
	}
	return arr, nil
}

// encodeDefault is the JSON of the lake value v (change.Values form) of
// a column of Iceberg type t.
func encodeDefault(mem memory.Allocator, t iceberg.Type, v any) (json.RawMessage, error) {
	dt, err := table.TypeToArrowType(t, false, false)
	if err != nil {
		return nil, err
	}
	b := array.NewBuilder(mem, dt)
	defer b.Release()
	if err := appendValue(b, v); err != nil {
		return nil, err
	}
	arr := b.NewArray()
	defer arr.Release()
	js, err := arr.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var one []json.RawMessage
	if err := json.Unmarshal(js, &one); err != nil || len(one) != 1 {
		return nil, fmt.Errorf("encode default value: %s is not one JSON value (%v)", js, err)
	}
	// Check that it reads back as itself.
	back, err := DefaultArray(mem, dt, Default{Value: one[0]})
	if err != nil {
		return nil, err
	}
	defer back.Release()
	if !array.Equal(back, arr) {
		return nil, fmt.Errorf("default value %s does not read back as written", one[0])
	}
	return one[0], nil
}

// defaultsNote returns the AddColumnsNoting note that records the missing
// values of the fields of s among add in tb's PropDefaults.
func (w *Writer) defaultsNote(tb *tableBuf, s *change.Schema, add []iceberg.NestedField) (func(int64) map[string]string, error) {
	adding := map[string]bool{}
	for _, f := range add {
		adding[f.Name] = true
	}
	entries := map[string]Default{}
	for _, f := range s.Fields {
		if !adding[f.Name] || f.Missing == nil {
			continue
		}
		v, err := encodeDefault(w.mem, f.Type, f.Missing)
		if err != nil {
			return nil, fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("bronze table %s column %q: record its default", tb.name(), f.Name), err)
		}
		entries[f.Name] = Default{Value: v, Text: f.MissingText}
	}
	if len(entries) == 0 {
		return nil, nil
	}
	return func(snap int64) map[string]string {
		all, err := Defaults(tb.tbl.Properties())
		if err != nil || all == nil {
			all = map[string]Default{}
		}
		for name, d := range entries {
			d.Snapshot = snap
			all[name] = d
		}
		js, _ := json.Marshal(all)
		return map[string]string{PropDefaults: string(js)}
	}, nil
}

// arm notes the missing values of s's fields that tb has not yet seen a
// row carry: rows written without such a column get its missing value.
func (tb *tableBuf) arm(s *change.Schema) {
	for _, f := range s.Fields {
		if f.Missing != nil {
			tb.missing[f.Name] = f.Missing
		}
		if f.Missing == nil || tb.seen[f.Name] {
			continue
		}
		if _, ok := tb.armed[f.Name]; ok {
			continue
		}
		tb.armed[f.Name] = f.Missing
		tb.layout = map[*change.Schema]*layout{}
	}
}

// noteSeen disarms the columns of s, whose first row sits at pos: a row
// that carries a column means the source has it, and a later change without
// it follows a DROP COLUMN (NULL, as for any dropped column). A snapshot
// chunk without it whose low watermark is below pos was read before the
// ALTER, though, and gets the missing value (chunkFill).
func (tb *tableBuf) noteSeen(s *change.Schema, pos change.Position) {
	changed := false
	for _, f := range s.Fields {
		if _, ok := tb.armed[f.Name]; ok {
			delete(tb.armed, f.Name)
			changed = true
		}
		if !tb.seen[f.Name] {
			tb.seen[f.Name] = true
			tb.firstSeen[f.Name] = pos
		}
	}
	if changed {
		tb.layout = map[*change.Schema]*layout{}
	}
}

// chunkFill is the missing value of column name for the rows of a chunk at
// low watermark lsn that lack it, if they get one: the column has one, and
// its first row in this process came after the chunk's low watermark (the
// chunk was read before the ALTER that added it).
func (tb *tableBuf) chunkFill(name string, lsn uint64) (any, bool) {
	v, ok := tb.missing[name]
	if !ok || !tb.seen[name] || lsn >= tb.firstSeen[name].LSN {
		return nil, false
	}
	return v, true
}

// forgetDefaults drops the recorded defaults (and what tb armed or saw)
// of columns deleted from the table, adding the new PropDefaults to props
// when there was one to drop.
func (tb *tableBuf) forgetDefaults(names []string, props map[string]string) {
	all, _ := Defaults(tb.tbl.Properties())
	dropped := false
	for _, n := range names {
		if _, ok := all[n]; ok {
			delete(all, n)
			dropped = true
		}
		delete(tb.armed, n)
		delete(tb.missing, n)
		delete(tb.seen, n)
		delete(tb.firstSeen, n)
	}
	if dropped {
		js, _ := json.Marshal(all)
		props[PropDefaults] = string(js)
	}
}

// renameDefaults moves the recorded defaults (and what tb armed) of renamed
// columns to their new names, adding the new PropDefaults to props when
// there is one to move.
func (tb *tableBuf) renameDefaults(renames []lake.Rename, props map[string]string) error {
	all, err := Defaults(tb.tbl.Properties())
	if err != nil {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("bronze table %s", tb.name()), err)
	}
	moved := false
	for _, r := range renames {
		if d, ok := all[r.From]; ok {
			delete(all, r.From)
			all[r.To] = d
			moved = true
		}
		for _, m := range []map[string]any{tb.armed, tb.missing} {
			if v, ok := m[r.From]; ok {
				delete(m, r.From)
				m[r.To] = v
			}
		}
		if tb.seen[r.From] {
			delete(tb.seen, r.From)
			tb.seen[r.To] = true
		}
		if p, ok := tb.firstSeen[r.From]; ok {
			delete(tb.firstSeen, r.From)
			tb.firstSeen[r.To] = p
		}
	}
	if moved {
		js, _ := json.Marshal(all)
		props[PropDefaults] = string(js)
	}
	return nil
}
