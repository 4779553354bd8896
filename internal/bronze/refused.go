package bronze

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/tidemark/tidemark/internal/change"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
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

// SetRefused records the tables the capture leaves out (replacing the
// set recorded before).
func (w *Writer) SetRefused(ctx context.Context, refused map[change.TableID]string) error {
	list := make([]RefusedTable, 0, len(refused))
	for id, why := range refused {
		list = append(list, RefusedTable{Schema: id.Schema, Table: id.Name, Reason: why})
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
	if err := w.cat.SetNamespaceProperties(ctx, SourceNamespace(w.source), map[string]string{PropRefused: string(b)}); err != nil {
		return fmt.Errorf("bronze: record the tables source %s leaves out: %w", w.source, err)
	}
	return nil
}

// Refused reads the tables the capture of source leaves out.
func Refused(ctx context.Context, cat *lake.Catalog, source string) ([]RefusedTable, error) {
	props, err := cat.NamespaceProperties(ctx, SourceNamespace(source))
	if err != nil {
		if errors.Is(err, lake.ErrNoSuchNamespace) {
			return nil, nil
		}
		return nil, fmt.Errorf("bronze: read the tables source %s leaves out: %w", source, err)
	}
	raw := props[PropRefused]
	if raw == "" {
		return nil, nil
	}
	var list []RefusedTable
	if err := json.Unmarshal([]byte(raw), &list); err != nil {
		return nil, fmt.Errorf("bronze: namespace property %s of source %s is unreadable: %w", PropRefused, source, err)
	}
	return list, nil
}
