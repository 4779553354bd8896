package bronze

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/lake"
)

// A key change (a primary key added to or changed on a captured table,
// docs/bronze.md "Key changes of a table"): the source commits a marker
// (an empty commit that requests a re-read of the table) whose props
// carry the new key as tidemark.key (pipeline.PropKey). Like every
// tidemark.* prop it is carried forward in every later commit, so the
// latest summary's key is the table's key from the marker on; rows before
// the marker are keyed by the key before it.
//
// The table property of the same name, which readers of the table take
// the key from (silver, verify), is set to the new key right after the
// marker is committed (the next OpenTable, settleKey): a crash between the
// two leaves the summary's key, which the next start sets again.

// effectiveKey is the key tb's rows are keyed by from its latest commit
// on (JSON, "" if the table records none).
func (tb *tableBuf) effectiveKey() string {
	return RecordedKey(tb.props, tb.tbl.Properties())
}

// settleKey sets the table property PropKey to the key the latest commit
// carries, after a key change.
func (tb *tableBuf) settleKey(ctx context.Context) error {
	k := tb.props[PropKey]
	if k == "" || tb.tbl.Properties()[PropKey] == k {
		return nil
	}
	if err := tb.tbl.SetProperties(ctx, map[string]string{PropKey: k}); err != nil {
		return fmt.Errorf("bronze: record the new key %s of %s: %w", k, tb.name(), err)
	}
	return nil
}

// TableKey returns the key the bronze table of id records (that of its
// latest key change, else the one it was created with); false if there
// is no bronze table of id yet, or it records no key. The capture opens a
// table with it when the source's key changed since, so that the rows
// before the change are written by the old key until the change's marker.
func (w *Writer) TableKey(ctx context.Context, id change.TableID) ([]string, bool, error) {
	key, ok, err := w.KeyRecorded(ctx, id)
	if err != nil || !ok || len(key) == 0 {
		return nil, false, err
	}
	return key, true, nil
}

// KeyRecorded returns the key the bronze table of id records from its
// latest commit on, as TableKey does, but [] (and true) for a table
// captured with no key; false if there is no bronze table of id, or it
// records none. The MySQL capture opens a table by it when the source's
// key changed since (a keyless table that got a key included), so that
// the rows before the change are written as before until the change's
// marker.
func (w *Writer) KeyRecorded(ctx context.Context, id change.TableID) ([]string, bool, error) {
	var raw string
	if tb, ok := w.tables[id]; ok {
		raw = tb.effectiveKey()
	} else {
		tbl, err := w.cat.Open(ctx, Ident(w.source, id))
		if errors.Is(err, lake.ErrNoSuchTable) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("bronze: read the key of %s: %w", strings.Join(Ident(w.source, id), "."), err)
		}
		raw = RecordedKey(tbl.Summary(), tbl.Properties())
	}
	var key []string
	if raw == "" || json.Unmarshal([]byte(raw), &key) != nil || key == nil {
		return nil, false, nil // checkKey names it
	}
	return key, true, nil
}
