package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/failpoint"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/testenv"
)

// scrape is one read of /metrics: every sample, by its name and labels as
// printed ("name{a="x",b="y"}").
type scrape struct {
	body    string
	samples map[string]float64
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// scrapeMetrics reads /metrics; ok is false while nothing listens yet.
func scrapeMetrics(t *testing.T, addr string) (_ scrape, ok bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return scrape{}, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	s := scrape{body: string(b), samples: map[string]float64{}}
	for _, line := range strings.Split(s.body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unreadable metrics line %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		s.samples[m[1]+m[2]] = v
	}
	return s, true
}

// get returns the sample name{labels} (labels in the order Prometheus
// prints them: sorted by name), and whether it exists.
func (s scrape) get(name string, labels ...string) (float64, bool) {
	key := name
	if len(labels) > 0 {
		var parts []string
		for i := 0; i+1 < len(labels); i += 2 {
			parts = append(parts, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
		}
		key += "{" + strings.Join(parts, ",") + "}"
	}
	v, ok := s.samples[key]
	return v, ok
}

// TestMetricsAsAUserChecksThem runs a pipeline with --metrics-addr, writes
// rows (one of them a dead letter), forces a capture session to fail (its
// walsender is terminated) and one silver merge to fail (an injected
// bronze read error), and scrapes /metrics as an on-call engineer would:
// the rows committed equal the rows written, by operation; the latency
// histograms count every transaction once, in bronze and in silver;
// silver's backlog returns to 0; the errors are counted by layer and code
// and the restart is counted; no label carries a secret, a key or a
// position.
func TestMetricsAsAUserChecksThem(t *testing.T) {
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "metrics")
	pg.Exec(t, url, `CREATE TABLE m (id int PRIMARY KEY, v text, n numeric(12,2));
		INSERT INTO m SELECT g, 'snap', g FROM generate_series(1, 50) g`)
	wh := t.TempDir()
	cfg := testConfig(t, url, wh)
	cfg.MetricsAddr = freeAddr(t)
	cfg.Silver.Every = config.Duration(200 * time.Millisecond)
	// The second bronze read of silver fails once (the first is the
	// build's): one merge of a published table fails, and is retried.
	if err := failpoint.Enable("silver-read-bronze=2*error"); err != nil {
		t.Fatal(err)
	}
	defer failpoint.Enable("")
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx, cfg, log) }()
	defer func() {
		cancel()
		<-done
	}()
	src := cfg.Name
	const table = "public.m"
	// waitFor scrapes until ok holds of a scrape.
	waitFor := func(what string, ok func(s scrape) bool) scrape {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			select {
			case err := <-done:
				done <- err
				t.Fatalf("run stopped while waiting for %s: %v; log:\n%s", what, err, logs.String())
			default:
			}
			s, up := scrapeMetrics(t, cfg.MetricsAddr)
			if up && ok(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("waited 2 minutes for %s; metrics:\n%s\nlog:\n%s", what, s.body, logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	val := func(s scrape, name string, labels ...string) float64 {
		v, _ := s.get(name, labels...)
		return v
	}
	s := waitFor("the snapshot and a published silver table", func(s scrape) bool {
		return val(s, "tidemark_snapshot_done", "source", src, "table", table) == 1 &&
			val(s, "tidemark_silver_published", "source", src, "table", table) == 1
	})
	if got := val(s, "tidemark_snapshot_read_rows", "source", src, "table", table); got != 50 {
		t.Errorf("snapshot read rows = %v, want 50", got)
	}
	if got := val(s, "tidemark_snapshot_chunks_committed_total", "source", src, "table", table); got < 1 {
		t.Errorf("snapshot chunks committed = %v, want >= 1", got)
	}
	if got, ok := s.get("tidemark_snapshot_estimated_rows", "source", src, "table", table); !ok || got < 0 {
		t.Errorf("snapshot estimated rows = %v (present %v)", got, ok)
	}

	// Stream: 10 transactions of 3 changes (insert a new key, update and
	// delete two snapshot rows, every key touched once), and one whose only
	// row is a dead letter (a numeric(12,2) NaN).
	write := func(from int) {
		for i := from; i < from+5; i++ {
			pg.Exec(t, url, fmt.Sprintf(`BEGIN; INSERT INTO m VALUES (%d, 'new', %d); UPDATE m SET v = 'upd' WHERE id = %d; DELETE FROM m WHERE id = %d; COMMIT;`,
				100+i, i, i+1, 50-i))
		}
	}
	write(0)
	waitFor("the first 5 transactions in bronze and silver, the failed merge retried", func(s scrape) bool {
		return val(s, "tidemark_bronze_rows_committed_total", "source", src, "table", table) == 50+15 &&
			val(s, "tidemark_silver_changes_merged_total", "source", src, "table", table) == 15 &&
			val(s, "tidemark_retries_total", "layer", "silver", "source", src) == 1
	})
	// From now on, the first change silver reads is one it cannot merge:
	// a silver dead letter (the bronze read failure has fired).
	if err := failpoint.Enable("silver-change-dead-letter=1*error"); err != nil {
		t.Fatal(err)
	}
	// A forced capture failure: the walsender is terminated. The session
	// ends with a retryable error, and a new one starts.
	pg.Exec(t, url, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE active_pid IS NOT NULL`)
	waitFor("a capture restart", func(s scrape) bool {
		return val(s, "tidemark_capture_restarts_total", "source", src) >= 1 &&
			val(s, "tidemark_capture_sessions_total", "source", src) >= 2
	})
	write(5)
	pg.Exec(t, url, `INSERT INTO m VALUES (999, 'dead letter', 'NaN')`)
	const txs = 10
	s = waitFor("every change in bronze and silver caught up", func(s scrape) bool {
		return val(s, "tidemark_bronze_rows_committed_total", "source", src, "table", table) == 50+3*txs &&
			val(s, "tidemark_bronze_dead_letters_total", "source", src, "table", table) == 1 &&
			val(s, "tidemark_silver_changes_merged_total", "source", src, "table", table) == 3*txs &&
			val(s, "tidemark_silver_behind_commits", "source", src, "table", table) == 0
	})
	// The silver dead letter: counted, in silver's dead-letter table, and
	// the 29 other changes merged.
	if got := val(s, "tidemark_silver_dead_letters_total", "source", src, "table", table); got != 1 {
		t.Errorf("silver dead letters = %v, want 1 (the change the failpoint made unmergeable)", got)
	}
	if dl := bronzetest.Read(t, wh, silver.DeadLetterIdent(src)...); len(dl) != 1 ||
		dl[0]["source_table"] != table || !strings.Contains(fmt.Sprint(dl[0]["error"]), "injected by failpoint") {
		t.Errorf("silver's dead-letter table holds %v, want the one change of %s the failpoint named", dl, table)
	}
	if up, del := val(s, "tidemark_silver_rows_upserted_total", "source", src, "table", table),
		val(s, "tidemark_silver_rows_deleted_total", "source", src, "table", table); up+del != 3*txs-1 || up < 2*txs-1 || del < txs-1 {
		t.Errorf("silver rows upserted %v, deleted %v: want %d and %d, less the dead letter", up, del, 2*txs, txs)
	}
	for op, want := range map[string]float64{"read": 50, "insert": txs, "update": txs, "delete": txs, "truncate": 0} {
		if got := val(s, "tidemark_bronze_changes_committed_total", "op", op, "source", src, "table", table); got != want {
			t.Errorf("bronze changes committed, op %s = %v, want %v", op, got, want)
		}
	}
	for _, name := range []string{"tidemark_bronze_commits_total", "tidemark_bronze_committed_bytes_total", "tidemark_bronze_last_commit_timestamp_seconds",
		"tidemark_silver_merges_total", "tidemark_silver_merge_duration_seconds_count"} {
		if got := val(s, name, "source", src, "table", table); got <= 0 {
			t.Errorf("%s = %v, want > 0", name, got)
		}
	}
	// One observation per transaction, in each layer: the transactions
	// replayed after the restart are not counted twice.
	if got := val(s, "tidemark_bronze_latency_seconds_count", "source", src, "table", table); got != txs {
		t.Errorf("bronze latency histogram count = %v, want %d (the transactions of the table)", got, txs)
	}
	if got := val(s, "tidemark_silver_latency_seconds_count", "source", src, "table", table); got != txs {
		t.Errorf("silver latency histogram count = %v, want %d", got, txs)
	}
	if got := val(s, "tidemark_bronze_latency_seconds_sum", "source", src, "table", table); got <= 0 || got > txs*120 {
		t.Errorf("bronze latency sum = %v s for %d transactions", got, txs)
	}
	if got := val(s, "tidemark_silver_behind_changes", "source", src, "table", table); got != 0 {
		t.Errorf("silver behind changes = %v, want 0", got)
	}
	if got := val(s, "tidemark_silver_behind_seconds", "source", src, "table", table); got != 0 {
		t.Errorf("silver behind seconds = %v, want 0", got)
	}
	if got := val(s, "tidemark_errors_total", "code", "transient", "layer", "capture", "source", src); got < 1 {
		t.Errorf("capture errors with code transient = %v, want >= 1:\n%s", got, grepLines(s.body, "tidemark_errors_total"))
	}
	if got := val(s, "tidemark_errors_total", "code", "unclassified", "layer", "silver", "source", src); got != 1 {
		t.Errorf("silver errors (the injected bronze read failure) = %v, want 1:\n%s", got, grepLines(s.body, "tidemark_errors_total"))
	}
	if got := val(s, "tidemark_retries_total", "layer", "silver", "source", src); got != 1 {
		t.Errorf("silver retries = %v, want 1", got)
	}
	for _, reason := range []string{"commit_conflict", "catalog_busy", "file_vanished"} {
		if _, ok := s.get("tidemark_lake_retries_total", "reason", reason, "source", src); !ok {
			t.Errorf("no tidemark_lake_retries_total for reason %s:\n%s", reason, grepLines(s.body, "tidemark_lake_retries_total"))
		}
	}
	if got := val(s, "tidemark_memory_heap_live_bytes", "source", src); got <= 0 {
		t.Errorf("live heap = %v", got)
	}
	if got := val(s, "tidemark_memory_budget_bytes", "source", src); got != float64(cfg.MemoryBudget) {
		t.Errorf("memory budget = %v, want %d", got, cfg.MemoryBudget)
	}

	// tidemark status --format json has the figures the lake holds.
	var out bytes.Buffer
	if err := app.Status(context.Background(), wh, cfg.Catalog, config.Secret{}, "json", &out); err != nil {
		t.Fatal(err)
	}
	var sts []app.TableStatus
	if err := json.Unmarshal(out.Bytes(), &sts); err != nil {
		t.Fatalf("status json: %v\n%s", err, out.String())
	}
	found := false
	for _, st := range sts {
		if st.Table != "bronze."+src+"."+table {
			continue
		}
		found = true
		if st.BronzeRows != 50+3*txs || !st.SilverPublished || st.BronzeSnapshotAt == "" || st.SilverChangesBehind != 0 {
			t.Errorf("status of %s: bronze_rows %d (want %d), silver_published %v, bronze_snapshot_at %q, silver_changes_behind %d",
				st.Table, st.BronzeRows, 50+3*txs, st.SilverPublished, st.BronzeSnapshotAt, st.SilverChangesBehind)
		}
	}
	if !found {
		t.Errorf("status lacks bronze.%s.%s:\n%s", src, table, out.String())
	}

	// Labels come from bounded sets only: no secret, key or position.
	if strings.Contains(s.body, pg.Password) {
		t.Error("the source password appears in the metrics")
	}
	allowed := map[string]map[string]bool{
		"source": {src: true}, "table": {table: true},
		"op":     {"read": true, "insert": true, "update": true, "delete": true, "truncate": true},
		"layer":  {"capture": true, "silver": true},
		"reason": {"commit_conflict": true, "catalog_busy": true, "file_vanished": true},
	}
	label := regexp.MustCompile(`([a-z_]+)="([^"]*)"`)
	for key := range s.samples {
		i := strings.IndexByte(key, '{')
		if i < 0 {
			continue
		}
		for _, m := range label.FindAllStringSubmatch(key[i:], -1) {
			switch m[1] {
			case "le", "code", "class":
				if strings.ContainsAny(m[2], " /@:") {
					t.Errorf("%s: label %s=%q is not a bounded value", key, m[1], m[2])
				}
			default:
				if !allowed[m[1]][m[2]] {
					t.Errorf("%s: label %s=%q is not from a bounded set", key, m[1], m[2])
				}
			}
		}
	}
}

func grepLines(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
