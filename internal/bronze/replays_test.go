package bronze_test

import (
	"context"
	"testing"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// TestKeepReplays: a writer that keeps replays (tidemark load: a table's
// partitions arrive side by side) writes a change below the table's cursor
// that the default writer drops, and NoteProps lands in the table's next
// commit, where Props reads it back without opening the table.
func TestKeepReplays(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	id := change.TableID{Schema: "public", Name: "t"}
	write := func(keep bool, pos change.Position, key int64, props map[string]string) {
		t.Helper()
		cat, w := openWriter(t, wh)
		defer cat.Close()
		defer w.Close()
		if keep {
			w.KeepReplays()
		}
		if _, err := w.OpenTable(ctx, id, testSchema); err != nil {
			t.Fatal(err)
		}
		if err := w.Write(ctx, &change.Change{Table: id, Op: change.OpInsert, Schema: testSchema, Pos: pos, Values: []any{key, "v"}}); err != nil {
			t.Fatal(err)
		}
		if props != nil {
			if err := w.NoteProps(id, props); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(ctx, pipeline.Checkpoint{Pos: pos.LSN, Resume: "1"}); err != nil {
			t.Fatal(err)
		}
	}
	write(false, change.Position{LSN: 100, Seq: 1}, 1, nil)
	write(false, change.Position{LSN: 50, Seq: 1}, 2, nil)                                       // below the cursor: dropped
	write(true, change.Position{LSN: 60, Seq: 1}, 3, map[string]string{"tidemark.x": "offsets"}) // kept
	rows := bronzetest.Read(t, wh, bronze.Ident("src", id)...)
	if got := keys(rows); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("bronze keys %v, want [1 3]", got)
	}
	cat, _ := openWriter(t, wh)
	defer cat.Close()
	props, ok, err := bronze.Props(ctx, cat, "src", id)
	if err != nil || !ok || props["tidemark.x"] != "offsets" {
		t.Fatalf("Props: %v %v %v, want tidemark.x=offsets", props, ok, err)
	}
	if _, ok, err := bronze.Props(ctx, cat, "src", change.TableID{Schema: "public", Name: "none"}); ok || err != nil {
		t.Fatalf("Props of a table that does not exist: ok=%v err=%v", ok, err)
	}
}
