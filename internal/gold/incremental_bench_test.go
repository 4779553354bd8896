package gold_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/gold"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/silver"
)

// BenchmarkIncrementalRefresh: a gold refresh after a few changes to a
// large silver table, incremental against a full recompute of the same
// query in the same run (TIDEMARK_GOLD_BENCH_ROWS silver rows, default
// 500,000 in commits of 100,000; each round 700 updates among the newest
// 5% of the rows and 300 inserts, as orders change). Reports both times
// (medians of b.N rounds) and their ratio.
//
//	go test -run XXX -bench IncrementalRefresh -benchtime 5x ./internal/gold/
func BenchmarkIncrementalRefresh(b *testing.B) {
	n := 500_000
	if v, err := strconv.Atoi(os.Getenv("TIDEMARK_GOLD_BENCH_ROWS")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	wh := b.TempDir()
	cat, err := iceberg.Open(ctx, iceberg.Config{Warehouse: wh})
	if err != nil {
		b.Fatal(err)
	}
	defer cat.Close()
	br, err := cat.Create(ctx, []string{"bronze", "shop", "public", "orders"}, lake.TableSpec{Schema: bronzeOrders})
	if err != nil {
		b.Fatal(err)
	}
	sv, err := cat.Create(ctx, silver.Ident("shop", "public", "orders"), lake.TableSpec{Schema: orders, Key: []string{"id"},
		Properties: map[string]string{bronze.PropKey: `["id"]`}})
	if err != nil {
		b.Fatal(err)
	}
	t := &testing.T{}
	s := &shop{t: t, ctx: ctx, br: br, sv: sv, rows: map[int64]order{}, rng: rand.New(rand.NewPCG(1, 2))}
	for s.next < int64(n) {
		ops := map[int64]string{}
		for range min(100_000, n-int(s.next)) {
			s.next++
			s.rows[s.next] = order{customer: int32(1 + s.rng.IntN(1000)), total: int64(s.rng.IntN(100_000))}
			ops[s.next] = "c"
		}
		s.round++
		s.commit(ops, false)
	}
	r := gold.NewRefresher(cat, gold.Options{Source: "shop", Warehouse: wh, TempDir: filepath.Join(wh, "tmp"), MemoryLimit: 64 << 20}, slog.New(slog.DiscardHandler))
	sql := "SELECT customer_id, count(*) AS orders, sum(total) AS revenue FROM silver.public.orders GROUP BY 1"
	inc, full := gold.Spec{Name: "inc", SQL: sql}, gold.Spec{Name: "full", SQL: sql}
	for _, sp := range []gold.Spec{inc, full} {
		if _, err := r.Refresh(ctx, sp, true); err != nil {
			b.Fatal(err)
		}
	}
	var ti, tf []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Orders change while they are new: 700 updates among the newest
		// 5% of the rows (amounts, and customers), 300 inserts.
		ops := map[int64]string{}
		for range 700 {
			id := s.next - int64(s.rng.IntN(n/20))
			o := s.rows[id]
			o.total = int64(s.rng.IntN(100_000))
			if s.rng.IntN(4) == 0 {
				o.customer = int32(1 + s.rng.IntN(1000))
			}
			s.rows[id] = o
			ops[id] = "u"
		}
		for range 300 {
			s.next++
			s.rows[s.next] = order{customer: int32(1 + s.rng.IntN(1000)), total: int64(s.rng.IntN(100_000))}
			ops[s.next] = "c"
		}
		s.round++
		s.commit(ops, false)
		if err := sv.Refresh(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		res, err := r.Refresh(ctx, inc, false)
		if err != nil {
			b.Fatal(err)
		}
		if res.Mode != gold.ModeIncremental {
			b.Fatalf("refresh %d was %s: %s", i, res.Mode, res.WhyFull)
		}
		ti = append(ti, time.Since(t0))
		t0 = time.Now()
		if _, err := r.Refresh(ctx, full, true); err != nil {
			b.Fatal(err)
		}
		tf = append(tf, time.Since(t0))
	}
	mi, mf := median(ti), median(tf)
	b.ReportMetric(mi.Seconds(), "incremental-s")
	b.ReportMetric(mf.Seconds(), "full-s")
	b.ReportMetric(mf.Seconds()/mi.Seconds(), "full/incremental")
	b.Logf("%d silver rows, 1,000 changed keys (the newest 5%%) a refresh: incremental %v, full %v (median of %d): %.1fx faster", n, mi, mf, b.N, mf.Seconds()/mi.Seconds())
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}
