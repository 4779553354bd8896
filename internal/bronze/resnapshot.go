package bronze

import (
	"context"
	"fmt"
	"strings"

	"github.com/tidemark/tidemark/internal/change"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// RequestSnapshot records a re-snapshot request (`tidemark resnapshot`) in
// the bronze table of t: one commit without rows whose summary carries the
// table's tidemark.* state, with tidemark.snapshot set back to "pending"
// for request id and tidemark.resnapshot = id. The next run reads the table
// again from its first key; silver applies the re-snapshot once it is
// complete (internal/silver, resnapshot.go). Bronze stays append-only:
// nothing already written changes. Call it only while the pipeline is
// stopped (its writer would otherwise commit its older state over it).
// It returns the id of the commit.
func RequestSnapshot(ctx context.Context, cat *lake.Catalog, source string, t change.TableID, id string) (int64, error) {
	ident := Ident(source, t)
	tbl, err := cat.LoadTable(ctx, ident)
	if err != nil {
		return 0, fmt.Errorf("bronze: re-snapshot %s: %w", strings.Join(ident, "."), err)
	}
	props := map[string]string{}
	for k, v := range tbl.Summary() {
		if strings.HasPrefix(k, "tidemark.") {
			props[k] = v
		}
	}
	props[pipeline.PropSnapshot] = pipeline.PendingSnapshot(id)
	props[pipeline.PropResnapshot] = id
	props[pipeline.PropResnapshotReason] = "requested by `tidemark resnapshot`"
	if err := tbl.Append(ctx, nil, props); err != nil {
		return 0, fmt.Errorf("bronze: record the re-snapshot request of %s: %w", strings.Join(ident, "."), err)
	}
	cur, _ := tbl.CurrentSnapshot()
	return cur.ID, nil
}
