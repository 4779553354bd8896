package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/control"
	"github.com/tidemark/tidemark/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// backends runs f on each state store: embedded SQLite and PostgreSQL.
func backends(t *testing.T, f func(t *testing.T, state string)) {
	t.Run("sqlite", func(t *testing.T) { f(t, t.TempDir()) })
	t.Run("postgres", func(t *testing.T) {
		pg := testenv.Shared(t)
		f(t, pg.CreateDB(t, "ctlstate"))
	})
}

func openStore(t *testing.T, state string) *control.Store {
	t.Helper()
	st, err := control.OpenStore(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

const twoOrgs = `
organisations:
  - name: acme
    projects:
      - name: shop
        environments:
          - name: prod
            pipelines:
              - name: orders
                source: "${ACME_PG}"
                tables: [public.orders]
                settings: {commit_interval: 200ms}
                triggers:
                  - {name: airflow, on: snapshot_completed, url: "http://127.0.0.1:9/api"}
  - name: globex
    projects:
      - name: crm
        environments:
          - name: prod
            pipelines:
              - name: contacts
                source: "postgres://globex@db.internal/crm?password=${GLOBEX_PW}"
                triggers:
                  - {name: airflow, on: snapshot_completed, url: "http://127.0.0.1:9/api"}
`

func TestDeclaration(t *testing.T) {
	l := control.Layout{LakeRoot: "/lake"}
	resolve := func(y string, sc control.Scope) ([]control.Desired, error) {
		d, err := control.ParseDeclaration([]byte(y))
		if err != nil {
			return nil, err
		}
		_, ds, err := l.Resolve(d, sc)
		return ds, err
	}
	ds, err := resolve(twoOrgs, control.Scope{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 {
		t.Fatalf("want 2 pipelines, got %d", len(ds))
	}
	r := string(ds[0].Rendered)
	for _, want := range []string{`url: "${ACME_PG}"`, "warehouse: /lake/acme/shop/prod/orders", "slot: tidemark_acme_shop_prod_orders", "commit_interval: 200ms"} {
		if !strings.Contains(r, want) {
			t.Errorf("rendered config lacks %q:\n%s", want, r)
		}
	}
	// The rendered configs are what `tidemark run` accepts, for each way
	// of giving the source.
	t.Setenv("ACME_PG", "postgres://acme@db/shop")
	t.Setenv("GLOBEX_PW", "pw")
	srcFile := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(srcFile, []byte("mysql://app:pw@db:3306/shop"), 0o600); err != nil {
		t.Fatal(err)
	}
	variants, err := resolve(twoOrgs+`
  - name: initech
    projects:
      - name: erp
        environments:
          - name: dev
            pipelines:
              - {name: byfile, source_file: "`+srcFile+`", source_type: mysql}
              - {name: bykafka, source: "${ACME_PG}", sink: "kafka://127.0.0.1:9092"}
`, control.Scope{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range variants {
		if err := control.CheckRendered(t.TempDir(), d); err != nil {
			t.Errorf("%s: %v\n%s", d.Path(), err, d.Rendered)
		}
		if strings.Contains(d.Spec.Sink, "kafka") && !strings.Contains(string(d.Rendered), "topic_prefix: initech.erp.dev.bykafka") {
			t.Errorf("%s: no environment topic prefix:\n%s", d.Path(), d.Rendered)
		}
	}
	again, _ := resolve(twoOrgs, control.Scope{})
	if again[0].Checksum != ds[0].Checksum {
		t.Error("the same declaration rendered to another checksum")
	}
	changed, _ := resolve(strings.Replace(twoOrgs, "commit_interval: 200ms", "commit_interval: 300ms", 1), control.Scope{})
	if changed[0].Checksum == ds[0].Checksum || changed[1].Checksum != ds[1].Checksum {
		t.Error("a changed setting must change that pipeline's checksum, and only its")
	}

	for name, tc := range map[string]struct {
		yaml string
		want string
		is   error
	}{
		"inline password in URL":              {strings.Replace(twoOrgs, `"${ACME_PG}"`, `"postgres://app:hunter2@db/shop"`, 1), "inline_secret", control.ErrInlineSecret},
		"inline password key=value":           {strings.Replace(twoOrgs, `"${ACME_PG}"`, `"host=db user=app password=hunter2"`, 1), "inline_secret", control.ErrInlineSecret},
		"credentials in trigger URL":          {strings.Replace(twoOrgs, `"http://127.0.0.1:9/api"`, `"http://u:hunter2@127.0.0.1:9/api"`, 1), "inline_secret", control.ErrInlineSecret},
		"warehouse is the control plane's":    {strings.Replace(twoOrgs, "{commit_interval: 200ms}", "{warehouse: /elsewhere}", 1), "settings.warehouse: set by the control plane", nil},
		"topic prefix is the control plane's": {strings.Replace(twoOrgs, "{commit_interval: 200ms}", "{topic_prefix: globex}", 1), "settings.topic_prefix: set by the control plane", nil},
		"unknown key":                         {strings.Replace(twoOrgs, "tables:", "tabels:", 1), "field tabels not found", nil},
		"bad event":                           {strings.Replace(twoOrgs, "on: snapshot_completed", "on: sometimes", 1), "want snapshot_completed", nil},
	} {
		_, err := resolve(tc.yaml, control.Scope{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
			t.Errorf("%s: got %v, want an error with %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
	}
	if _, err := resolve(twoOrgs, control.Scope{Org: "acme"}); err == nil || !strings.Contains(err.Error(), "outside this token's scope") {
		t.Errorf("an acme token applying globex: got %v", err)
	}
}

func TestLeaseFencing(t *testing.T) {
	backends(t, func(t *testing.T, state string) {
		ctx := context.Background()
		a, b := openStore(t, state), openStore(t, state)
		fa, ok, err := a.AcquireLease(ctx, "p1", "serve-a", time.Hour)
		if err != nil || !ok || fa != 1 {
			t.Fatalf("first acquire: fence %d ok %v err %v", fa, ok, err)
		}
		if _, ok, _ := b.AcquireLease(ctx, "p1", "serve-b", time.Hour); ok {
			t.Fatal("a second serve took a live lease")
		}
		if ok, _ := a.RenewLease(ctx, "p1", "serve-a", fa, 50*time.Millisecond); !ok {
			t.Fatal("the holder could not renew")
		}
		time.Sleep(100 * time.Millisecond)
		fb, ok, err := b.AcquireLease(ctx, "p1", "serve-b", time.Hour)
		if err != nil || !ok || fb != 2 {
			t.Fatalf("takeover of an expired lease: fence %d ok %v err %v", fb, ok, err)
		}
		if ok, _ := a.RenewLease(ctx, "p1", "serve-a", fa, time.Hour); ok {
			t.Fatal("the fenced-off holder renewed its lost lease")
		}
		_ = a.ReleaseLease(ctx, "p1", "serve-a", fa) // must not release b's
		if _, ok, _ := a.AcquireLease(ctx, "p1", "serve-a", time.Hour); ok {
			t.Fatal("a stale release freed the successor's lease")
		}
	})
}

// downstream is a real HTTP server standing for Airflow: for each run id,
// the first call answers 404 (the DAG does not exist yet), the next one
// creates the run (the effective call), and every later one answers 409.
type downstream struct {
	srv       *httptest.Server
	mu        sync.Mutex
	calls     map[string]int
	effective map[string]int
	hold      chan struct{} // if set, the effective call waits on it
	inFlight  chan string   // told the run id of an effective call in flight
}

func newDownstream(t *testing.T) *downstream {
	d := &downstream{calls: map[string]int{}, effective: map[string]int{}}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			RunID string `json:"dag_run_id"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &body); err != nil || body.RunID == "" {
			http.Error(w, "no dag_run_id", http.StatusBadRequest)
			return
		}
		d.mu.Lock()
		d.calls[body.RunID]++
		n := d.calls[body.RunID]
		first := n == 2
		if first {
			d.effective[body.RunID]++
		}
		hold, inFlight := d.hold, d.inFlight
		d.mu.Unlock()
		switch {
		case n == 1:
			http.Error(w, "DAG not found", http.StatusNotFound)
		case first:
			if inFlight != nil {
				inFlight <- body.RunID
			}
			if hold != nil {
				<-hold
			}
			w.WriteHeader(http.StatusOK)
		default:
			http.Error(w, "DAG run exists", http.StatusConflict)
		}
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *downstream) counts(runID string) (calls, effective int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[runID], d.effective[runID]
}

func TestTriggerExactlyOnce(t *testing.T) {
	backends(t, func(t *testing.T, state string) {
		ctx := context.Background()
		ds := newDownstream(t)
		stores := []*control.Store{openStore(t, state), openStore(t, state)}
		p := control.Pipeline{ID: "pid1", Org: "acme", Project: "shop", Env: "prod", Name: "orders",
			Spec: control.PipelineSpec{Name: "orders", Triggers: []control.TriggerSpec{{Name: "airflow", On: control.EventSnapshotCompleted, URL: ds.srv.URL}}}}
		// The event observed eight times at once, on two connections.
		var recorded atomic.Int64
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n, err := stores[i%2].RecordEvent(ctx, p, control.EventSnapshotCompleted, "ev1")
				if err != nil {
					t.Error(err)
				}
				recorded.Add(int64(n))
			}()
		}
		wg.Wait()
		if recorded.Load() != 1 {
			t.Fatalf("the event was recorded %d times, want 1", recorded.Load())
		}
		// A deliverer that dies in the middle of the effective call (its
		// context ends; its claim stays), then four deliverers racing.
		ds.hold, ds.inFlight = make(chan struct{}), make(chan string, 1)
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		mk := func(i int) *control.Deliverer {
			return &control.Deliverer{Store: stores[i%2], Holder: "d" + string(rune('a'+i)), Log: log, Client: &http.Client{},
				InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, ClaimTTL: 500 * time.Millisecond}
		}
		dctx, kill := context.WithCancel(ctx)
		go func() {
			for dctx.Err() == nil {
				_ = mk(0).DeliverDue(dctx)
				time.Sleep(5 * time.Millisecond)
			}
		}()
		select {
		case <-ds.inFlight:
		case <-time.After(20 * time.Second):
			t.Fatal("no effective call within 20s")
		}
		kill()
		close(ds.hold)
		ds.mu.Lock()
		ds.hold, ds.inFlight = nil, nil
		ds.mu.Unlock()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var wg sync.WaitGroup
			for i := 1; i <= 4; i++ {
				wg.Add(1)
				go func() { defer wg.Done(); _ = mk(i).DeliverDue(ctx) }()
			}
			wg.Wait()
			ts, err := stores[0].Triggers(ctx, control.Scope{}, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(ts) != 1 {
				t.Fatalf("want 1 trigger row, got %d", len(ts))
			}
			if ts[0].Completed != nil {
				if ts[0].RunID != "snapshot_ev1" || ts[0].LastStatus != http.StatusConflict {
					t.Errorf("trigger: run id %q, last status %d; want snapshot_ev1 completed by a 409", ts[0].RunID, ts[0].LastStatus)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("trigger not completed: %+v", ts[0])
			}
			time.Sleep(20 * time.Millisecond)
		}
		calls, eff := ds.counts("snapshot_ev1")
		if eff != 1 || calls < 3 {
			t.Errorf("downstream saw %d calls, %d effective; want exactly 1 effective (after a 404, and a 409 after the crash)", calls, eff)
		}
		time.Sleep(100 * time.Millisecond) // nothing is called after completion
		if c2, _ := ds.counts("snapshot_ev1"); c2 != calls {
			t.Errorf("calls went on after completion: %d then %d", calls, c2)
		}
	})
}
