package bronze

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/lake"
)

// KeepReplays makes Write (and DeadLetter, Message) keep the changes at or
// below a table's cursor,
// for a source that deduplicates its replays itself and whose changes of
// one table may arrive out of position order: tidemark load reads a
// table's topic partitions side by side (each in position order, not
// together), and the consumer offsets it commits with each table
// (NoteProps) say exactly what the table holds, so nothing is replayed
// into it. Call it before the first Write.
func (w *Writer) KeepReplays() { w.keepReplays = true }

// NoteProps records props for the next commit of id's bronze table, which
// then commits even without rows; later commits carry them forward, as
// WriteBatch's. An id with an empty Schema names one of bronze.<source>'s
// own tables (MessagesTable, DeadLetterTable). The table must be open.
// Stream goroutine only.
func (w *Writer) NoteProps(id change.TableID, props map[string]string) error {
	tb := w.tables[id]
	if id.Schema == "" {
		switch id.Name {
		case MessagesTable:
			tb = w.msgs
		case DeadLetterTable:
			tb = w.dead
		}
	}
	if tb == nil {
		return fmt.Errorf("bronze: props for table %s before OpenTable", id)
	}
	tb.noteProgress(props)
	return nil
}

// Props returns the tidemark.* properties of the latest commit of id's
// bronze table in pipeline source (id.Schema "": one of bronze.<source>'s
// own tables), without opening it for writing; ok=false when the table
// does not exist yet.
func Props(ctx context.Context, cat lake.Catalog, source string, id change.TableID) (props map[string]string, ok bool, err error) {
	ident := Ident(source, id)
	if id.Schema == "" {
		ident = append(SourceNamespace(source), id.Name)
	}
	tbl, err := cat.Open(ctx, ident)
	if errors.Is(err, lake.ErrNoSuchTable) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("bronze: read table %s: %w", strings.Join(ident, "."), err)
	}
	props = map[string]string{}
	for k, v := range tbl.Summary() {
		if strings.HasPrefix(k, "tidemark.") {
			props[k] = v
		}
	}
	return props, true, nil
}
