package bronze

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/lake"
)

// PropRefused is a property of namespace bronze.<source>: the published
// tables the capture leaves out on their own (no key it can merge by, a
// name the lake cannot hold), with the named error that says why and how
// to fix it (a JSON list of RefusedTable). Each capture session replaces
// it, so a table fixed since is no longer listed.
const PropRefused = "tidemark.refused"

// RefusedTable is one table the capture leaves out.
type RefusedTable struct {
	Schema string `json:"schema"`
	Table  string `json:"table"`
	Reason string `json:"reason"`
}

// PropBronzeOnly is a property of namespace bronze.<source>: the captured
// tables that have no key to merge by, so bronze only and no silver table
// (their bronze tables record tidemark.key = []), with the named error
// (no_primary_key) that says why and how to give them a key (a JSON list
// of RefusedTable). Each capture session replaces it, as PropRefused.
const PropBronzeOnly = "tidemark.bronze_only"

// SetRefused records the tables the capture leaves out (replacing the
// set recorded before).
func (w *Writer) SetRefused(ctx context.Context, refused map[change.TableID]string) error {
	if err := w.setTableList(ctx, PropRefused, refused); err != nil {
		return fmt.Errorf("bronze: record the tables source %s leaves out: %w", w.source, err)
	}
	return nil
}

// SetBronzeOnly records the tables captured into bronze only (replacing
// the set recorded before).
func (w *Writer) SetBronzeOnly(ctx context.Context, keyless map[change.TableID]string) error {
	if err := w.setTableList(ctx, PropBronzeOnly, keyless); err != nil {
		return fmt.Errorf("bronze: record the tables of source %s captured into bronze only: %w", w.source, err)
	}
	return nil
}

// setTableList sets namespace property prop to the tables of why, sorted.
func (w *Writer) setTableList(ctx context.Context, prop string, why map[change.TableID]string) error {
	list := make([]RefusedTable, 0, len(why))
	for id, r := range why {
		list = append(list, RefusedTable{Schema: id.Schema, Table: id.Name, Reason: r})
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Schema != list[j].Schema {
			return list[i].Schema < list[j].Schema
		}
		return list[i].Table < list[j].Table
	})
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return w.cat.SetNamespaceProperties(ctx, SourceNamespace(w.source), map[string]string{prop: string(b)})
}

// Refused reads the tables the capture of source leaves out.
func Refused(ctx context.Context, cat lake.Catalog, source string) ([]RefusedTable, error) {
	list, err := tableList(ctx, cat, source, PropRefused)
	if err != nil {
		return nil, fmt.Errorf("bronze: read the tables source %s leaves out: %w", source, err)
	}
	return list, nil
}

// BronzeOnly reads the tables of source captured into bronze only.
func BronzeOnly(ctx context.Context, cat lake.Catalog, source string) ([]RefusedTable, error) {
	list, err := tableList(ctx, cat, source, PropBronzeOnly)
	if err != nil {
		return nil, fmt.Errorf("bronze: read the tables of source %s captured into bronze only: %w", source, err)
	}
	return list, nil
}

func tableList(ctx context.Context, cat lake.Catalog, source, prop string) ([]RefusedTable, error) {
	props, err := cat.NamespaceProperties(ctx, SourceNamespace(source))
	if err != nil {
		if errors.Is(err, lake.ErrNoSuchNamespace) {
			return nil, nil
		}
		return nil, err
	}
	raw := props[prop]
	if raw == "" {
		return nil, nil
	}
	var list []RefusedTable
	if err := json.Unmarshal([]byte(raw), &list); err != nil {
		return nil, fmt.Errorf("namespace property %s is unreadable: %w", prop, err)
	}
	return list, nil
}
