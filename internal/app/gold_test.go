package app_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark/tidemark/internal/gold"
	lakeapi "github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/testenv"
)

// goldSQL is the gold query of the tests, and goldPG the same on the source.
const (
	goldSQL = "SELECT customer_id, count(*) AS orders, sum(total) AS revenue FROM silver.public.orders GROUP BY 1"
	goldPG  = "SELECT customer_id, count(*), sum(total)::text FROM public.orders GROUP BY 1"
)

// writeGoldConfig writes a config file holding only a gold: list of
// name, sql pairs.
func writeGoldConfig(t *testing.T, dir, file string, nameSQL ...string) string {
	t.Helper()
	p := filepath.Join(dir, file)
	body := "gold:\n"
	for i := 0; i+1 < len(nameSQL); i += 2 {
		body += fmt.Sprintf("  - name: %s\n    sql: %q\n    every: after_each_silver_merge\n", nameSQL[i], nameSQL[i+1])
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// goldOnSource runs the gold query on PostgreSQL: customer -> "orders revenue".
func goldOnSource(t *testing.T, srcURL string) map[string]string {
	t.Helper()
	c := connect(t, srcURL)
	defer c.Close(context.Background())
	rows, err := c.Query(context.Background(), goldPG)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var cust, n int64
		var sum string
		if err := rows.Scan(&cust, &n, &sum); err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprint(cust)] = fmt.Sprintf("%d %s", n, sum)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// goldInLake reads the gold table with tidemark's own reader (nil: no table yet).
func (l *lakeView) goldInLake(name string) map[string]string {
	tbl, err := l.cat.LoadTable(context.Background(), gold.Ident(l.source, name))
	if err != nil {
		return nil
	}
	out := map[string]string{}
	err = tbl.Scan(context.Background(), func(rec arrow.RecordBatch) error {
		c := rec.Column(0).(*array.Int32)
		n := rec.Column(1).(*array.Int64)
		s := rec.Column(2).(*array.Decimal128)
		scale := rec.Schema().Field(2).Type.(*arrow.Decimal128Type).Scale
		for i := 0; i < int(rec.NumRows()); i++ {
			out[fmt.Sprint(c.Value(i))] = fmt.Sprintf("%d %s", n.Value(i), s.Value(i).ToString(scale))
		}
		return nil
	})
	if err != nil {
		l.t.Logf("read gold: %v", err)
		return nil
	}
	return out
}

// goldRows counts the live rows of a table.
func (l *lakeView) goldRows(ident []string) int64 {
	tbl, err := l.cat.LoadTable(context.Background(), ident)
	if err != nil {
		l.t.Fatal(err)
	}
	var n int64
	if err := tbl.Scan(context.Background(), func(rec arrow.RecordBatch) error { n += rec.NumRows(); return nil }); err != nil {
		l.t.Fatal(err)
	}
	return n
}

func diffGold(want, got map[string]string) string {
	var d []string
	for k, w := range want {
		if got[k] != w {
			d = append(d, fmt.Sprintf("customer %s: source %q, gold %q", k, w, got[k]))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("customer %s: not at the source, gold %q", k, g))
		}
	}
	sort.Strings(d)
	if len(d) > 10 {
		d = append(d[:10], fmt.Sprintf("... %d more", len(d)-10))
	}
	return strings.Join(d, "\n")
}

// TestGoldAggregateE2E (issue 20): a gold: entry of tidemark run over a
// workload of inserts, updates (of the group-by column too) and deletes,
// with a SIGKILL and a restart: once the pipeline has caught up, the gold
// table PyIceberg reads equals the same query run on PostgreSQL, its commit
// records the silver snapshot it was computed from, status shows it, and
// `tidemark gold refresh` recomputes it. A config whose gold SQL DuckDB
// rejects, or that names a table the source lacks, stops tidemark run at
// start with exit 2 and the named error.
func TestGoldAggregateE2E(t *testing.T) {
	t.Parallel()
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "gold_e2e")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `
		CREATE TABLE public.orders (id bigserial PRIMARY KEY, customer_id int NOT NULL, total numeric(12,2) NOT NULL);
		INSERT INTO public.orders (customer_id, total) SELECT 1 + g % 20, (g % 997) / 10.0 FROM generate_series(1, 500) g;`)
	dir := t.TempDir()
	// overflow's query is valid, but its sum does not fit the long gold
	// stores: every refresh of it fails on the data, beside per_customer.
	cfg := writeGoldConfig(t, dir, "gold.yaml", "per_customer", goldSQL,
		"overflow", "SELECT sum(customer_id) + 9223372036854775807::HUGEINT AS too_big FROM silver.public.orders")
	r, wh := newRunner(t, bin, srcURL, "--config", cfg, "--silver-every", "300ms")
	lk := openLake(t, wh, source)

	// The workload: inserts, updates of total and of customer_id, deletes.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		c := connect(t, srcURL)
		defer c.Close(context.Background())
		rng := rand.New(rand.NewPCG(20, 1))
		for ctx.Err() == nil {
			var q string
			switch k := rng.IntN(10); {
			case k < 4:
				q = fmt.Sprintf("INSERT INTO public.orders (customer_id, total) VALUES (%d, %d.%02d)", 1+rng.IntN(25), rng.IntN(500), rng.IntN(100))
			case k < 6:
				q = fmt.Sprintf("UPDATE public.orders SET total = total + 1.25 WHERE id = (SELECT id FROM public.orders ORDER BY random() LIMIT 1)")
			case k < 8:
				q = fmt.Sprintf("UPDATE public.orders SET customer_id = %d WHERE id = (SELECT id FROM public.orders ORDER BY random() LIMIT 1)", 1+rng.IntN(25))
			default:
				q = "DELETE FROM public.orders WHERE id = (SELECT id FROM public.orders ORDER BY random() LIMIT 1)"
			}
			if _, err := c.Exec(ctx, q); err != nil && ctx.Err() == nil {
				done <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		done <- nil
	}()

	first := r.Start()
	// Kill once gold has been written at least once, mid-workload.
	deadline := time.Now().Add(time.Minute)
	for lk.goldInLake("per_customer") == nil {
		if first.Exited() {
			t.Fatalf("tidemark session 1 exited by itself: %v", first.Err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no gold table gold.%s.per_customer within a minute", source)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Duration(rand.IntN(1500)) * time.Millisecond)
	first.Kill(t)
	time.Sleep(500 * time.Millisecond)
	s := r.Start()
	time.Sleep(time.Second)
	// A truncate amid the workload: gold recomputes in full after it.
	pg.Exec(t, srcURL, "TRUNCATE public.orders")
	time.Sleep(2 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	lk.waitCaughtUp(s, walLSN(t, srcURL), time.Minute, "orders")

	want := goldOnSource(t, srcURL)
	deadline = time.Now().Add(time.Minute)
	for {
		got := lk.goldInLake("per_customer")
		d := diffGold(want, got)
		if d == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gold.%s.per_customer does not equal the query on PostgreSQL a minute after the pipeline caught up:\n%s", source, d)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}

	// PyIceberg reads the same, and the commit says what it read.
	ident := gold.Ident(source, "per_customer")
	if rows, ok := testenv.PyIcebergRead(t, wh, ident); ok {
		got := map[string]string{}
		for _, row := range rows {
			got[fmt.Sprint(row["customer_id"])] = fmt.Sprintf("%v %v", row["orders"], row["revenue"])
		}
		if d := diffGold(want, got); d != "" {
			t.Errorf("PyIceberg reads gold.%s.per_customer different from the query on PostgreSQL:\n%s", source, d)
		}
	}
	gt, err := lk.cat.LoadTable(context.Background(), ident)
	if err != nil {
		t.Fatal(err)
	}
	st, err := lk.cat.LoadTable(context.Background(), []string{"silver", source, "public", "orders"})
	if err != nil {
		t.Fatal(err)
	}
	snap, _ := st.CurrentSnapshot()
	reads := gold.Reads(gt.Summary())
	if len(reads) != 1 || reads[0].Table != "silver.public.orders" || reads[0].Snapshot != snap.ID || reads[0].Position == "" {
		t.Errorf("the gold commit records reads %+v, want silver.public.orders at silver's current snapshot %d with its position", reads, snap.ID)
	}
	if gt.Summary()[gold.PropPlan] != gold.ModeIncremental || gt.Summary()[gold.PropMode] == "" || gt.Summary()["tidemark.position"] == "" {
		t.Errorf("the gold commit's summary lacks plan incremental, mode or position: %v", gt.Summary())
	}
	// The query decomposes: refreshes after the first applied silver's
	// changes, but where the truncate made a recompute necessary.
	head, _ := gt.CurrentSnapshot()
	hist, err := gt.History(lakeapi.NoSnapshot, head.ID)
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]int{}
	var whys []string
	for _, h := range hist {
		if m := h.Props[gold.PropMode]; m != "" {
			modes[m]++
			if w := h.Props[gold.PropWhyFull]; w != "" {
				whys = append(whys, w)
			}
		}
	}
	t.Logf("gold refreshes by mode: %v; full because: %v", modes, whys)
	if modes[gold.ModeIncremental] == 0 || !slices.ContainsFunc(whys, func(w string) bool { return strings.Contains(w, "truncated") }) {
		t.Errorf("gold refreshes by mode %v, full because %v: want incremental ones, and a full one after the truncate", modes, whys)
	}

	out, err := exec.Command(bin, "status", "--warehouse", wh).CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark status: %v\n%s", err, out)
	}
	if l := lineWith(string(out), "gold."+source+".per_customer"); !strings.Contains(l, "incremental") || !strings.Contains(l, fmt.Sprintf("silver.public.orders@%d", snap.ID)) {
		t.Errorf("tidemark status does not show gold.%s.per_customer as incremental from silver.public.orders@%d:\n%s", source, snap.ID, out)
	}

	// The failing gold table did not stop the pipeline (it was stopped with
	// exit 0 above); it is named with its code in the log and in status.
	if l := lineWith(string(out), "gold."+source+".overflow"); !strings.Contains(l, "[gold_refresh_failed]") || !strings.Contains(l, "in a row") {
		t.Errorf("tidemark status does not show gold.%s.overflow failing with [gold_refresh_failed]:\n%s", source, out)
	}
	if logs, _ := os.ReadFile(r.LogPath); !strings.Contains(string(logs), "gold refresh failed") || !strings.Contains(string(logs), "code=gold_refresh_failed") {
		t.Errorf("the log does not name the failed gold refresh with its code")
	}
	if _, err := lk.cat.LoadTable(context.Background(), gold.Ident(source, "overflow")); err == nil {
		// Created with its columns by the first refresh, but never holding a wrong result.
		if rows := lk.goldRows(gold.Ident(source, "overflow")); rows != 0 {
			t.Errorf("gold.%s.overflow holds %d rows, want none: its every refresh failed", source, rows)
		}
	}

	out, err = exec.Command(bin, "gold", "refresh", "per_customer", "--config", cfg, "--source", srcURL, "--warehouse", wh).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "gold."+source+".per_customer refreshed: ") {
		t.Fatalf("tidemark gold refresh: %v\n%s", err, out)
	}
	if d := diffGold(want, lk.goldInLake("per_customer")); d != "" {
		t.Errorf("after tidemark gold refresh, gold differs from the source:\n%s", d)
	}

	// Bad gold SQL: exit 2 at start, naming the table, the entry and the cause.
	for _, c := range []struct{ sql, want string }{
		{"SELECT custmer_id, count(*) FROM silver.public.orders GROUP BY 1", "custmer_id"},
		{"SELECT count(*) FROM silver.public.ordres", "silver.public.ordres is not a table of source " + source},
	} {
		bad := writeGoldConfig(t, dir, "bad.yaml", "per_customer", c.sql)
		cmd := exec.Command(bin, "run", "--config", bad, "--source", srcURL, "--warehouse", wh)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("tidemark run with gold sql %q: %v, want exit 2\n%s", c.sql, err, stderr.String())
			continue
		}
		msg := stderr.String()
		for _, w := range []string{"[gold_invalid]", "gold." + source + ".per_customer", c.want, "fix it in the config file"} {
			if !strings.Contains(msg, w) {
				t.Errorf("tidemark run with gold sql %q: the error does not say %q:\n%s", c.sql, w, msg)
			}
		}
	}
}
