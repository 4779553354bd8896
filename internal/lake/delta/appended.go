package delta

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
)

// Appended returns the add actions (dataChange = true) of the commits
// after `after` (exclusive; -1: from the first) up to and including to, in
// commit order: what those commits appended. It reads the commit files,
// so the range must still be in the log (the writer deletes none); the
// error wraps os.ErrNotExist otherwise.
func (t *Table) Appended(after, to int64) ([]Add, error) {
	if to > t.Version() || after > to {
		return nil, fmt.Errorf("Delta table %s: appended range (%d, %d] is not in the log (version %d)", t.dir, after, to, t.Version())
	}
	var out []Add
	for v := after + 1; v <= to; v++ {
		acts, err := readCommit(t.dir, v)
		if err != nil {
			return nil, fmt.Errorf("Delta table %s: %w", t.dir, err)
		}
		for _, a := range acts {
			// An add with a deletion vector re-adds a file with rows
			// deleted: it appends nothing.
			if a.Add != nil && a.Add.DataChange && (len(a.Add.DeletionVector) == 0 || string(a.Add.DeletionVector) == "null") {
				out = append(out, *a.Add)
			}
		}
	}
	return out, nil
}

// ScanAppended calls fn with the rows the commits of (after, to] added
// (see Appended), file by file in commit order, row order kept within a
// file. Batches are released when fn returns.
func (t *Table) ScanAppended(ctx context.Context, after, to int64, fn func(arrow.RecordBatch) error) error {
	adds, err := t.Appended(after, to)
	if err != nil {
		return err
	}
	for _, a := range adds {
		if err := t.scanFile(ctx, a, fn); err != nil {
			return err
		}
	}
	return nil
}

// AppendedBounds returns, from the add actions' statistics alone (no data
// read), the rows the commits of (after, to] added and the largest value
// of the long column col among them; ok is false when some file lacks the
// statistic (a file whose col is all null needs none).
func (t *Table) AppendedBounds(after, to int64, col string) (rows, maxVal int64, ok bool, err error) {
	adds, err := t.Appended(after, to)
	if err != nil {
		return 0, 0, false, err
	}
	rows, maxVal, ok = appendedBounds(adds, col)
	return rows, maxVal, ok, nil
}

// appendedBounds returns the rows of adds and the largest value of the
// long column col among them, from their statistics; ok is false when
// some file lacks the statistic (a file whose col is all null needs none).
func appendedBounds(adds []Add, col string) (rows, maxVal int64, ok bool) {
	ok, seen := true, false
	for _, a := range adds {
		var st struct {
			NumRecords *int64                     `json:"numRecords"`
			Max        map[string]json.RawMessage `json:"maxValues"`
			Nulls      map[string]json.RawMessage `json:"nullCount"`
		}
		if a.Stats == "" || json.Unmarshal([]byte(a.Stats), &st) != nil || st.NumRecords == nil {
			return 0, 0, false
		}
		rows += *st.NumRecords
		if m, has := st.Max[col]; has {
			v, err := strconv.ParseInt(string(m), 10, 64)
			if err != nil {
				ok = false
				continue
			}
			if !seen || v > maxVal {
				maxVal, seen = v, true
			}
			continue
		}
		if n, err := strconv.ParseInt(string(st.Nulls[col]), 10, 64); err != nil || n != *st.NumRecords {
			ok = false
		}
	}
	return rows, maxVal, ok
}
