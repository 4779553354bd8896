package bronze_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/source/postgres"
)

// BenchmarkWrite buffers streamed changes (transactions of 5 rows) as the
// capture's hot path does, flushing outside the timer every 50,000 rows.
// Sub-benchmarks: without an observer, and with one (the metrics).
func BenchmarkWrite(b *testing.B) {
	for _, observed := range []bool{false, true} {
		name := "observer=none"
		if observed {
			name = "observer=recorder"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			cat, w := openWriter(b, b.TempDir())
			defer cat.Close()
			defer w.Close()
			if observed {
				w.Observe(&recorder{commits: map[change.TableID][]bronze.Commit{}, dead: map[change.TableID]int64{}})
			}
			id := change.TableID{Schema: "public", Name: "t"}
			if _, err := w.OpenTable(ctx, id, testSchema); err != nil {
				b.Fatal(err)
			}
			at := time.Now()
			c := &change.Change{Table: id, Op: change.OpUpdate, Schema: testSchema, Values: []any{int64(1), "a value of some length"}, CommitTime: at}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				lsn := uint64(1000 + i/5)
				c.Pos = change.Position{LSN: lsn, Seq: int64(i%5 + 1)}
				if err := w.Write(ctx, c); err != nil {
					b.Fatal(err)
				}
				if (i+1)%50_000 == 0 {
					b.StopTimer()
					if err := w.Flush(ctx, postgres.NewCheckpoint(lsn, lsn-1, at, 0, "slot")); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			}
		})
	}
}
