package bronze

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/lake"
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
func RequestSnapshot(ctx context.Context, cat lake.Catalog, source string, t change.TableID, id string) (int64, error) {
	ident := Ident(source, t)
	tbl, err := cat.Open(ctx, ident)
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

// PropReplacedBefore is pipeline.PropReplacedBefore, in the summary of a
// bronze table rebuilt by `tidemark resnapshot --replace`.
const PropReplacedBefore = pipeline.PropReplacedBefore

// ReplacedIdent is where `tidemark resnapshot --replace` keeps the old
// table of a replaced one (layer "bronze" or "silver"):
// <layer>_replaced.<source>.<schema>.<table>__<request id>. Nothing reads
// or writes it afterwards; drop it when it is no longer wanted.
func ReplacedIdent(layer, source string, t change.TableID, id string) []string {
	return []string{layer + "_replaced", source, t.Schema, t.Name + "__" + id}
}

// replacedKey is the property of the table's bronze namespace that
// carries PropReplacedBefore until the new bronze table is created.
func replacedKey(t change.TableID) string { return PropReplacedBefore + "." + t.Name }

// MarkReplaced records, for a stopped pipeline whose bronze table of t has
// been moved away (ReplacedIdent), that the table created in its place
// takes no stream change below position before (PropReplacedBefore).
func MarkReplaced(ctx context.Context, cat lake.Catalog, source string, t change.TableID, before uint64) error {
	ns := Namespace(source, t.Schema)
	if err := cat.EnsureNamespace(ctx, ns); err != nil {
		return err
	}
	return cat.SetNamespaceProperties(ctx, ns, map[string]string{replacedKey(t): fmt.Sprint(before)})
}

// replacedBefore is the mark MarkReplaced left for t ("" if none).
func (w *Writer) replacedBefore(ctx context.Context, t change.TableID) (string, error) {
	props, err := w.cat.NamespaceProperties(ctx, Namespace(w.source, t.Schema))
	if err != nil {
		if errors.Is(err, lake.ErrNoSuchNamespace) {
			return "", nil
		}
		return "", err
	}
	return props[replacedKey(t)], nil
}
