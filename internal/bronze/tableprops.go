package bronze

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/lake"
)

// TableProps returns the props of the latest commit of the bronze table
// of id (its tidemark.* state, carried forward in every commit), buffered
// ones included; false if there is no bronze table of id. A source reads
// what it recorded there before it opens the table (the MySQL source: the
// time_as its TIME columns landed under).
func (w *Writer) TableProps(ctx context.Context, id change.TableID) (map[string]string, bool, error) {
	if tb, ok := w.tables[id]; ok {
		return maps.Clone(tb.props), true, nil
	}
	tbl, err := w.cat.Open(ctx, Ident(w.source, id))
	if errors.Is(err, lake.ErrNoSuchTable) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("bronze: read the state of %s: %w", strings.Join(Ident(w.source, id), "."), err)
	}
	return maps.Clone(tbl.Summary()), true, nil
}
