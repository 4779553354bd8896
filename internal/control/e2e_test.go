package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/control"
	"github.com/tidemark/tidemark/internal/testenv"
)

// serveProc is one `tidemark serve` process of the end-to-end test.
type serveProc struct {
	cmd  *exec.Cmd
	addr string
	log  string
	done chan struct{}
}

func (s *serveProc) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// children lists the running `tidemark run` processes under data, by
// pipeline id (from the rendered config's path on their command line).
func children(data string) map[string][]int {
	out := map[string][]int{}
	ents, _ := os.ReadDir("/proc")
	prefix := filepath.Join(data, "run") + "/"
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 4 || args[1] != "run" {
			continue
		}
		for i, a := range args {
			if a == "--config" && i+1 < len(args) && strings.HasPrefix(args[i+1], prefix) {
				id := strings.Split(strings.TrimPrefix(args[i+1], prefix), "/")[0]
				out[id] = append(out[id], pid)
			}
		}
	}
	return out
}

// TestControlPlaneE2E runs the control plane as a user does, with real
// PostgreSQL sources and a PostgreSQL state store: two organisations with
// a pipeline each; apply, re-apply (nothing happens), change (that
// pipeline alone restarts), remove (stopped; its slot is left and named);
// serve SIGKILLed in the middle of a trigger call and restarted; a second
// serve on the same state (never a second replica), taking over when the
// first is SIGKILLed; every trigger effective exactly once downstream.
func TestControlPlaneE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	acmeURL, globexURL := pg.CreateDB(t, "acme"), pg.CreateDB(t, "globex")
	pg.Exec(t, acmeURL, "CREATE TABLE orders (id int PRIMARY KEY, amount int); INSERT INTO orders SELECT g, g*10 FROM generate_series(1, 50) g")
	pg.Exec(t, globexURL, "CREATE TABLE contacts (id int PRIMARY KEY, name text); INSERT INTO contacts SELECT g, 'c' || g FROM generate_series(1, 20) g")
	state := pg.CreateDB(t, "ctlstate")
	root := t.TempDir()
	data := filepath.Join(root, "data")
	tokenFile := filepath.Join(root, "admin-token")
	ds := newDownstream(t)
	ds.hold, ds.inFlight = make(chan struct{}), make(chan string, 4)

	// Sample the replicas all along: never two of one pipeline.
	var maxMu sync.Mutex
	maxReplicas := map[string]int{}
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			for id, pids := range children(data) {
				maxMu.Lock()
				maxReplicas[id] = max(maxReplicas[id], len(pids))
				maxMu.Unlock()
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stopSampling); <-sampled }()

	var serves []*serveProc
	start := func(name string) *serveProc {
		t.Helper()
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := l.Addr().String()
		l.Close()
		s := &serveProc{addr: addr, log: filepath.Join(root, name+".log"), done: make(chan struct{})}
		f, err := os.Create(s.log)
		if err != nil {
			t.Fatal(err)
		}
		s.cmd = exec.Command(bin, "serve", "--state", state, "--data", data, "--addr", addr, "--admin-token-file", tokenFile,
			"--poll", "200ms", "--lease-ttl", "3s", "--restart-initial-backoff", "200ms", "--restart-max-backoff", "2s", "--stop-timeout", "20s",
			"--trigger-initial-backoff", "200ms", "--trigger-max-backoff", "1s", "--trigger-claim-ttl", "4s")
		s.cmd.Env = append(os.Environ(), "ACME_PG="+acmeURL, "GLOBEX_PG="+globexURL, "BROKEN_PG="+pg.URL("no_such_db"))
		s.cmd.Stdout, s.cmd.Stderr = f, f
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = s.cmd.Wait(); f.Close(); close(s.done) }()
		serves = append(serves, s)
		for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
				resp.Body.Close()
				return s
			}
			if time.Now().After(end) || s.exited() {
				t.Fatalf("serve %s did not come up", name)
			}
		}
	}
	t.Cleanup(func() {
		for _, s := range serves {
			if !s.exited() {
				_ = s.cmd.Process.Kill()
				<-s.done
			}
		}
		if t.Failed() {
			for _, s := range serves {
				b, _ := os.ReadFile(s.log)
				t.Logf("----- %s -----\n%s", s.log, b)
			}
			logs, _ := filepath.Glob(filepath.Join(data, "run", "*", "run.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("----- %s (tail) -----\n%s", l, b)
			}
		}
	})
	kill := func(s *serveProc) {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	}
	ctx := context.Background()
	client := func(s *serveProc) *control.Client {
		tok, err := os.ReadFile(tokenFile)
		if err != nil {
			t.Fatal(err)
		}
		return &control.Client{Base: "http://" + s.addr, Token: strings.TrimSpace(string(tok))}
	}
	decl := func(commitInterval string, withGlobex bool) []byte {
		globex := "            pipelines: []\n"
		if withGlobex {
			globex = `            pipelines:
              - name: contacts
                source: "${GLOBEX_PG}"
                tables: [public.contacts]
                settings: {commit_interval: 200ms, heartbeat_interval: 200ms}
                triggers: [{name: airflow, on: snapshot_completed, url: "` + ds.srv.URL + `/globex"}]
`
		}
		return []byte(`organisations:
  - name: acme
    projects:
      - name: shop
        environments:
          - name: prod
            pipelines:
              - name: orders
                source: "${ACME_PG}"
                tables: [public.orders]
                settings: {commit_interval: ` + commitInterval + `, heartbeat_interval: 200ms,
                  gold: [{name: revenue, sql: "SELECT count(*) AS orders, sum(amount) AS total FROM silver.public.orders"}]}
                triggers: [{name: airflow, on: snapshot_completed, url: "` + ds.srv.URL + `/acme"}]
              - name: broken
                source: "${BROKEN_PG}"
  - name: globex
    projects:
      - name: crm
        environments:
          - name: prod
` + globex)
	}
	apply := func(s *serveProc, y []byte, prune bool) map[string]control.Change {
		t.Helper()
		cs, err := client(s).Apply(ctx, y, prune)
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
		out := map[string]control.Change{}
		for _, c := range cs {
			out[c.Path] = c
		}
		return out
	}
	pipelines := func(s *serveProc) map[string]control.Pipeline {
		t.Helper()
		ps, err := client(s).Pipelines(ctx)
		if err != nil {
			t.Fatalf("get pipelines: %v", err)
		}
		out := map[string]control.Pipeline{}
		for _, p := range ps {
			out[p.Path()] = p
		}
		return out
	}
	const acme, globex = "acme/shop/prod/orders", "globex/crm/prod/contacts"
	// waitSettled waits until each listed pipeline has exactly one child,
	// running its current config with its snapshot done, held by holder
	// (when given), and returns the pids.
	waitSettled := func(s *serveProc, what string, holderPID int, paths ...string) map[string]int {
		t.Helper()
		var last string
		for end := time.Now().Add(120 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			ps := pipelines(s)
			kids := children(data)
			pids := map[string]int{}
			ok := true
			last = ""
			for _, path := range paths {
				p, found := ps[path]
				st := p.Status
				switch {
				case !found:
					ok, last = false, last+path+": not declared; "
				case st == nil || st.State != "running" || st.Checksum != p.Checksum || !st.SnapshotDone:
					ok, last = false, last+fmt.Sprintf("%s: status %+v; ", path, st)
				case len(kids[p.ID]) != 1 || int64(kids[p.ID][0]) != st.PID:
					ok, last = false, last+fmt.Sprintf("%s: children %v, status pid %d; ", path, kids[p.ID], st.PID)
				case holderPID != 0 && !strings.Contains(st.Holder, fmt.Sprintf("-%d-", holderPID)):
					ok, last = false, last+fmt.Sprintf("%s: held by %s; ", path, st.Holder)
				default:
					pids[path] = kids[p.ID][0]
				}
			}
			if ok {
				return pids
			}
		}
		t.Fatalf("%s: pipelines did not settle: %s", what, last)
		return nil
	}

	// 1. serve, apply two organisations' pipelines.
	a := start("serve-a")
	ch := apply(a, decl("200ms", true), false)
	if ch[acme].Action != "created" || ch[globex].Action != "created" {
		t.Fatalf("first apply: %+v", ch)
	}
	ids := map[string]string{acme: ch[acme].ID, globex: ch[globex].ID}

	// 2. SIGKILL serve while a trigger call is in flight (the downstream
	// has taken the run; serve has not recorded it).
	select {
	case runID := <-ds.inFlight:
		t.Logf("trigger %s in flight: SIGKILL serve", runID)
	case <-time.After(120 * time.Second):
		t.Fatal("no trigger call within 120s of apply")
	}
	kill(a)
	ds.mu.Lock()
	close(ds.hold)
	ds.hold, ds.inFlight = nil, nil
	ds.mu.Unlock()
	for end := time.Now().Add(5 * time.Second); len(children(data)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the SIGKILLed serve left its pipelines running: %v", children(data))
		}
	}

	// 3. Restart serve: one replica each again, every trigger done once.
	a2 := start("serve-a2")
	pids := waitSettled(a2, "after the restart of serve", a2.cmd.Process.Pid, acme, globex)
	waitTriggers := func(n int) {
		t.Helper()
		var ts []control.Trigger
		for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			var err error
			if ts, err = client(a2).Triggers(ctx); err != nil {
				t.Fatal(err)
			}
			done := 0
			for _, tr := range ts {
				if tr.Completed != nil {
					done++
				}
			}
			if len(ts) == n && done == n {
				return
			}
		}
		t.Fatalf("triggers not all completed: %+v", ts)
	}
	waitTriggers(2)

	// Each environment's data is in its own warehouse prefix.
	for path, rows := range map[string]string{"acme/shop/prod/orders": `"snapshot_rows": 50`, "globex/crm/prod/contacts": `"snapshot_rows": 20`} {
		out, err := exec.Command(bin, "status", "--warehouse", filepath.Join(data, "lake", path), "--format", "json").CombinedOutput()
		if err != nil || !strings.Contains(string(out), rows) || !strings.Contains(string(out), `"snapshot": "done"`) {
			t.Fatalf("tidemark status of %s: %v\n%s", path, err, out)
		}
		if other := map[bool]string{true: "contacts", false: "orders"}[strings.HasPrefix(path, "acme")]; strings.Contains(string(out), other) {
			t.Errorf("%s's warehouse holds another tenant's table %s:\n%s", path, other, out)
		}
	}
	// A tenant's gold table lives in its own lake, computed from its own
	// silver.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(300 * time.Millisecond) {
		out, err := exec.Command(bin, "status", "--warehouse", filepath.Join(data, "lake", "acme/shop/prod/orders"), "--format", "json").CombinedOutput()
		if err == nil && strings.Contains(string(out), ".revenue\"") && strings.Contains(string(out), `"refreshed_at"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme's gold table revenue is not refreshed in acme's lake a minute after its snapshot: %v\n%s", err, out)
		}
	}
	if out, _ := exec.Command(bin, "status", "--warehouse", filepath.Join(data, "lake", "globex/crm/prod/contacts"), "--format", "json").CombinedOutput(); strings.Contains(string(out), "revenue") {
		t.Errorf("globex's lake holds acme's gold table:\n%s", out)
	}
	// The CLI: get (text, JSON), a scoped token, an inline password refused.
	cli := func(env []string, args ...string) (string, int) {
		cmd := exec.Command(bin, append(args, "--server", a2.addr)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		code := 0
		if err != nil {
			code = cmd.ProcessState.ExitCode()
		}
		return string(out), code
	}
	if out, code := cli(nil, "get", "pipelines", "--token-file", tokenFile); code != 0 || !strings.Contains(out, "acme/shop/prod/orders") || !strings.Contains(out, "running") {
		t.Errorf("get pipelines: exit %d\n%s", code, out)
	}
	tok, code := cli(nil, "token", "create", "globex/crm/prod", "--token-file", tokenFile)
	if code != 0 || !strings.HasPrefix(tok, "tmk_") {
		t.Fatalf("token create: exit %d: %s", code, tok)
	}
	out, code := cli([]string{"TIDEMARK_TOKEN=" + strings.TrimSpace(tok)}, "get", "pipelines", "-o", "json")
	var seen []control.Pipeline
	if err := json.Unmarshal([]byte(out), &seen); code != 0 || err != nil || len(seen) != 1 || seen[0].Path() != globex {
		t.Errorf("get pipelines -o json with a globex token: exit %d, %v: %s", code, err, out)
	}
	inline := filepath.Join(root, "inline.yaml")
	_ = os.WriteFile(inline, []byte(strings.Replace(string(decl("200ms", true)), `"${ACME_PG}"`, `"postgres://app:canary-pw-123@db/shop"`, 1)), 0o600)
	if out, code := cli(nil, "apply", "-f", inline, "--token-file", tokenFile); code != 2 || !strings.Contains(out, "[inline_secret]") || strings.Contains(out, "canary-pw-123") {
		t.Errorf("apply with an inline password: exit %d, want 2 and [inline_secret] without the password:\n%s", code, out)
	}

	// A pipeline that cannot run shows its named error and is restarted
	// with backoff.
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st := pipelines(a2)["acme/shop/prod/broken"].Status
		if st != nil && st.LastErrorCode == "bad_config" && st.Restarts >= 2 && strings.Contains(st.LastError, "database does not exist") {
			t.Logf("broken pipeline: %s, %d restarts, last error [%s] %s", st.State, st.Restarts, st.LastErrorCode, st.LastError)
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the broken pipeline's status: %+v", st)
		}
	}

	// 4. A second serve on the same state starts no second replica.
	b := start("serve-b")
	time.Sleep(2 * time.Second) // 10 polls
	if got := waitSettled(b, "with a second serve", a2.cmd.Process.Pid, acme, globex); got[acme] != pids[acme] || got[globex] != pids[globex] {
		t.Fatalf("a second serve changed the replicas: %v then %v", pids, got)
	}

	// 5. An unchanged apply does nothing.
	ch = apply(b, decl("200ms", true), false)
	if ch[acme].Action != "unchanged" || ch[globex].Action != "unchanged" {
		t.Fatalf("re-apply: %+v", ch)
	}
	time.Sleep(time.Second)
	if got := waitSettled(a2, "after an unchanged apply", 0, acme, globex); got[acme] != pids[acme] || got[globex] != pids[globex] {
		t.Fatalf("an unchanged apply restarted a pipeline: %v then %v", pids, got)
	}

	// 6. A changed pipeline restarts; the other does not.
	ch = apply(a2, decl("300ms", true), false)
	if ch[acme].Action != "changed" || ch[globex].Action != "unchanged" {
		t.Fatalf("apply of a change: %+v", ch)
	}
	got := waitSettled(a2, "after a change", 0, acme, globex)
	if got[acme] == pids[acme] || got[globex] != pids[globex] {
		t.Fatalf("after changing acme's pipeline: pids %v then %v; want acme's alone restarted", pids, got)
	}
	pids = got

	// 7. SIGKILL the serve holding the pipelines: the other takes over.
	kill(a2)
	waitSettled(b, "after the holder was SIGKILLed", b.cmd.Process.Pid, acme, globex)

	// 8. Remove globex's pipeline: stopped, its slot left and named.
	ch = apply(b, decl("300ms", false), false)
	rm := ch[globex]
	if rm.Action != "removed" || len(rm.LeftBehind) == 0 || !strings.Contains(strings.Join(rm.LeftBehind, " "), control.SlotName("globex", "crm", "prod", "contacts")) {
		t.Fatalf("removal: %+v", rm)
	}
	for end := time.Now().Add(30 * time.Second); len(children(data)[ids[globex]]) > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the removed pipeline still runs")
		}
	}
	if _, ok := pipelines(b)[globex]; ok {
		t.Fatal("the removed pipeline is still listed")
	}
	conn, err := pgx.Connect(ctx, globexURL)
	if err != nil {
		t.Fatal(err)
	}
	var slots int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", control.SlotName("globex", "crm", "prod", "contacts")).Scan(&slots); err != nil || slots != 1 {
		t.Fatalf("the removed pipeline's slot: %d (%v), want it left in place", slots, err)
	}
	conn.Close(ctx)
	waitSettled(b, "after the removal", 0, acme)

	// 9. apply --prune: acme's pipelines removed, their slot and lake dropped.
	emptyAcme := "organisations:\n  - name: acme\n    projects:\n      - name: shop\n        environments:\n          - name: prod\n            pipelines: []\n"
	ch = apply(b, []byte(emptyAcme), true)
	if c := ch[acme]; c.Action != "removed" || !c.Pruned || c.PruneError != "" {
		t.Fatalf("prune of %s: %+v", acme, c)
	}
	if c := ch["acme/shop/prod/broken"]; c.Action != "removed" || c.Pruned || !strings.Contains(c.PruneError, "connect to the source") {
		t.Errorf("prune of the broken pipeline (its database does not exist): %+v", c)
	}
	if _, err := os.Stat(filepath.Join(data, "lake", acme)); !os.IsNotExist(err) {
		t.Errorf("the pruned pipeline's warehouse is still there: %v", err)
	}
	conn, err = pgx.Connect(ctx, acmeURL)
	if err != nil {
		t.Fatal(err)
	}
	var pubs int
	if err := conn.QueryRow(ctx, "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1) + (SELECT count(*) FROM pg_publication WHERE pubname = $1)", control.SlotName("acme", "shop", "prod", "orders")).Scan(&pubs); err != nil || pubs != 0 {
		t.Errorf("the pruned pipeline's slot and publication: %d left (%v)", pubs, err)
	}
	conn.Close(ctx)

	// The sources' password (in serve's environment only) is nowhere: not
	// in serve's or the pipelines' logs, the API's answers, the state store.
	st, err := control.OpenStore(ctx, state)
	if err != nil {
		t.Fatal(err)
	}
	where := map[string]string{"state store": control.Dump(t, st)}
	st.Close()
	logs, _ := filepath.Glob(filepath.Join(data, "run", "*", "*"))
	for _, s := range serves {
		logs = append(logs, s.log)
	}
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		where[l] = string(b)
	}
	for _, path := range []string{"/v1/pipelines", "/v1/triggers"} {
		req, _ := http.NewRequest("GET", "http://"+b.addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+client(b).Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		where["GET "+path] = string(body)
	}
	for w, text := range where {
		if strings.Contains(text, pg.Password) {
			t.Errorf("the source password appears in %s", w)
		}
	}

	// 10. SIGTERM stops serve and its pipelines.
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not stop within 60s of SIGTERM")
	}
	if code := b.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("serve exit code %d after SIGTERM, want 0", code)
	}
	if k := children(data); len(k) > 0 {
		t.Errorf("pipelines still running after serve stopped: %v", k)
	}

	// Exactly one replica at any sampled moment; one effective call per event.
	maxMu.Lock()
	for id, n := range maxReplicas {
		if n != 1 {
			t.Errorf("pipeline %s had %d replicas at once", id, n)
		}
	}
	maxMu.Unlock()
	for path, id := range ids {
		calls, eff := ds.counts(control.RunID(control.EventSnapshotCompleted, control.SnapshotEventID(id)))
		if eff != 1 {
			t.Errorf("%s: %d effective downstream calls (of %d), want exactly 1", path, eff, calls)
		}
		t.Logf("%s: %d downstream calls, 1 effective", path, calls)
	}
}
