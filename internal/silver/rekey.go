package silver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// This file rebuilds a silver table on a new key (docs/silver.md, "Key
// changes").
//
// When a captured table's primary key is added or changed, the capture
// commits a marker to bronze that requests a re-read of the table and
// records the new key (bronze/rekey.go): rows after the marker are keyed
// by the new key, rows before it by the old one. Silver cannot merge rows
// of the new key into a table keyed by the old one, nor change the
// identifier fields of a table in place and keep its rows right, so it
// builds the table anew, under BuildingIdent, keyed by the new key, from
// what bronze appended after the marker (the re-read and the changes
// streamed meanwhile), as it builds a new table. The published table stays
// as it was (gated, like a re-snapshot) until the build is complete; then
// it is dropped and the new table renamed into its place. Readers see the
// old table until the drop and the new one after the rename (between the
// two, for one catalog commit, no table: a catalog has no atomic swap).
//
// A crash at any point is safe: the build resumes from its summary; a
// crash after the drop finds only the built table, which is published as
// any build. The old table's files stay for orphan-file removal.

// keyOfTable returns the key a silver table records (tidemark.key), nil
// if none can be read (checkKey names that).
func keyOfTable(s lake.Table) []string {
	var key []string
	if p := s.Properties()[bronze.PropKey]; p == "" || json.Unmarshal([]byte(p), &key) != nil {
		return nil
	}
	return key
}

// rekeyed returns the table to merge into when the published silver
// table s is keyed otherwise than bronze (key): the table being built on
// the new key, created if need be; s itself otherwise. rekey reports the
// former.
func (m *Merger) rekeyed(ctx context.Context, b lake.Table, s lake.KeyedTable, key []string, source, schema, table string) (lake.KeyedTable, bool, error) {
	have := keyOfTable(s)
	if have == nil || slices.Equal(have, key) {
		return s, false, nil
	}
	id := buildingIdent(source, schema, table)
	bs, err := m.cat.Open(ctx, id)
	if errors.Is(err, lake.ErrNoSuchTable) {
		if bs, err = m.create(ctx, id, Ident(source, schema, table), b, key); err != nil {
			return nil, false, err
		}
		m.log.Info("silver table rebuild on a new key started", "table", strings.Join(s.Ident(), "."),
			"key_was", strings.Join(have, ", "), "key", strings.Join(key, ", "))
	} else if err != nil {
		return nil, false, err
	}
	if k := keyOfTable(bs); !slices.Equal(k, key) {
		// Built for a key bronze no longer has (the key changed again
		// during the build): start over.
		if err := m.cat.Drop(ctx, id); err != nil && !errors.Is(err, lake.ErrNoSuchTable) {
			return nil, false, err
		}
		if bs, err = m.create(ctx, id, Ident(source, schema, table), b, key); err != nil {
			return nil, false, err
		}
	}
	return bs, true, nil
}

// rekeyReason is why a published table is held while it is rebuilt.
func rekeyReason(head lake.Snapshot, was, key []string) string {
	why := fmt.Sprintf("the table is rebuilt on its new key (%s); silver keeps the table keyed by (%s) until the rebuild is complete",
		strings.Join(key, ", "), strings.Join(was, ", "))
	if r := head.Props[pipeline.PropResnapshotReason]; r != "" {
		why = r + "; " + why
	}
	if open, g := gate(head.Props); !open {
		why += " (" + g + ")"
	}
	return why
}

// dropReplaced drops the published table old that the table built on a
// new key replaces, just before the build is renamed into its place.
func (m *Merger) dropReplaced(ctx context.Context, old []string) error {
	if err := m.cat.Drop(ctx, old); err != nil && !errors.Is(err, lake.ErrNoSuchTable) {
		return err
	}
	return nil
}
