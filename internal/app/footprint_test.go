package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/maintain"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/silver"
)

// TestStatusShowsFootprint: `tidemark status` shows, per table, bronze's
// and silver's files, bytes, delete files and last maintenance, and warns
// when silver's footprint passes its bound (a silver table merged in many
// steps with the merger's own compaction off); after `tidemark maintain`
// the warning is gone and the maintenance time shows.
func TestStatusShowsFootprint(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: wh})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	w, err := bronze.NewWriter(ctx, cat, "src", "slot", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	id := change.TableID{Schema: "public", Name: "hot"}
	sch := &change.Schema{Key: []string{"id"}, Fields: []change.Field{
		{Name: "id", Type: iceberg.PrimitiveTypes.Int64, SourceType: "bigint"},
		{Name: "v", Type: iceberg.PrimitiveTypes.String, SourceType: "text"},
	}}
	if _, err := w.OpenTable(ctx, id, sch); err != nil {
		t.Fatal(err)
	}
	lsn := uint64(1000)
	commit := func(op change.Op, n int, props map[string]string) {
		lsn += 100
		var cs []*change.Change
		for k := range n {
			cs = append(cs, &change.Change{Table: id, Op: op, Schema: sch, Values: []any{int64(k), fmt.Sprintf("v%d-%d", lsn, k)},
				Pos: change.Position{LSN: lsn, Seq: int64(k + 1)}, TxID: int64(lsn), CommitTime: time.Unix(int64(lsn), 0).UTC()})
		}
		if props != nil {
			err = w.WriteBatch(ctx, id, cs, props)
		} else {
			for _, c := range cs {
				if err = w.Write(ctx, c); err != nil {
					break
				}
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx, pipeline.Checkpoint{Resume: strconv.FormatUint(lsn+1, 10), Pos: lsn, Watermark: time.Unix(int64(lsn), 0)}); err != nil {
			t.Fatal(err)
		}
	}
	commit(change.OpRead, 400, map[string]string{pipeline.PropSnapshot: `{"status":"done","rows":400,"estimate":400}`})
	m := silver.NewMerger(cat, silver.Options{NoAutoCompact: true}, nil)
	for range 12 {
		if _, err := m.MergeTable(ctx, "src", id.Schema, id.Name); err != nil {
			t.Fatal(err)
		}
		commit(change.OpUpdate, 400, nil)
	}
	if _, err := m.MergeTable(ctx, "src", id.Schema, id.Name); err != nil {
		t.Fatal(err)
	}

	status := func(format string) string {
		var out bytes.Buffer
		if err := app.Status(ctx, wh, config.Secret{}, config.Secret{}, format, &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	row := func() app.TableStatus {
		var sts []app.TableStatus
		out := status("json")
		if err := json.Unmarshal([]byte(out), &sts); err != nil {
			t.Fatalf("status json: %v\n%s", err, out)
		}
		for _, st := range sts {
			if st.Table == "bronze.src.public.hot" {
				return st
			}
		}
		t.Fatalf("status lacks bronze.src.public.hot:\n%s", out)
		return app.TableStatus{}
	}
	st := row()
	b, s := st.BronzeFootprint, st.SilverFootprint
	if b == nil || s == nil {
		t.Fatalf("status has no footprints: %+v", st)
	}
	if b.DataFiles < 13 || b.DataBytes <= 0 || b.AppendedSinceCompaction != 13 || b.LastMaintenance != "" {
		t.Errorf("bronze footprint %+v: want 13 data files appended, none compacted", *b)
	}
	if s.DataFiles < 12 || s.DeleteFiles < 12 || s.Records-s.DeletedRecords != 400 || s.LiveBytes <= 0 || s.Ratio <= silver.RatioBound ||
		s.FileBound != silver.FileBound(silver.DefaultBuckets) || s.Warning == "" || s.LastMaintenance != "" {
		t.Errorf("silver footprint %+v: want >= 12 data and delete files, 400 live rows, a warning past the %dx bound", *s, silver.RatioBound)
	}
	text := status("text")
	t.Logf("status:\n%s", text)
	if !strings.Contains(text, "WARNING: footprint of silver.src.public.hot: bytes") || !strings.Contains(text, "FILES") ||
		!strings.Contains(text, fmt.Sprintf("%d/%d+%d", b.DataFiles, s.DataFiles, s.DeleteFiles)) {
		t.Errorf("status text lacks the footprint or its warning:\n%s", text)
	}
	if len(st.Warnings) != 1 {
		t.Errorf("warnings %q, want silver's only", st.Warnings)
	}

	if _, err := maintain.New(cat, maintain.Options{}, nil).Run(ctx, "src", nil); err != nil {
		t.Fatal(err)
	}
	st = row()
	b, s = st.BronzeFootprint, st.SilverFootprint
	if len(st.Warnings) != 0 || s.Warning != "" || s.DeleteFiles != 0 || s.LastMaintenance == "" || b.LastMaintenance == "" || b.AppendedSinceCompaction != 0 {
		t.Errorf("after maintain: warnings %q, bronze %+v, silver %+v", st.Warnings, *b, *s)
	}
	if text := status("text"); strings.Contains(text, "WARNING") {
		t.Errorf("status warns after maintain:\n%s", text)
	}
}
