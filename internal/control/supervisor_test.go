package control_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/control"
)

// alive says whether pid runs (and is not a zombie).
func alive(pid int64) bool {
	if pid <= 0 || syscall.Kill(int(pid), 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatInt(pid, 10) + "/stat")
	if err != nil {
		return false
	}
	// The state is the field after the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestSupervisorSelfFences: a serve that can no longer renew its leases
// (its state store unreachable) stops its replicas before the leases
// expire, so the serve that takes them over never runs a second replica
// beside them. The children are a stand-in process (no metrics), which is
// all the supervisor needs.
func TestSupervisorSelfFences(t *testing.T) {
	t.Setenv("ACME_PG", "postgres://acme@127.0.0.1:1/shop")
	t.Setenv("GLOBEX_PW", "pw")
	dir := t.TempDir()
	bin := filepath.Join(dir, "fake-tidemark")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	setup := openStore(t, state)
	layout := control.Layout{LakeRoot: filepath.Join(dir, "lake")}
	d, err := control.ParseDeclaration([]byte(twoOrgs))
	if err != nil {
		t.Fatal(err)
	}
	envs, desired, err := layout.Resolve(d, control.Scope{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Apply(context.Background(), envs, desired, layout); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const ttl = 1500 * time.Millisecond
	sup := func(st *control.Store, holder string) *control.Supervisor {
		return &control.Supervisor{Store: st, Holder: holder, Log: log, Bin: bin, RunDir: filepath.Join(dir, "run"), LeaseTTL: ttl,
			Poll: 100 * time.Millisecond, RestartInitial: 100 * time.Millisecond, RestartMax: time.Second, StopTimeout: 5 * time.Second}
	}
	pidsOf := func(holder string) map[string]int64 {
		ps, err := setup.Pipelines(context.Background(), control.Scope{}, layout)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, p := range ps {
			if p.Status != nil && p.Status.Holder == holder && p.Status.PID > 0 && alive(p.Status.PID) {
				out[p.ID] = p.Status.PID
			}
		}
		return out
	}
	waitPIDs := func(holder string) map[string]int64 {
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if p := pidsOf(holder); len(p) == 2 {
				return p
			}
		}
		t.Fatalf("%s did not start both pipelines", holder)
		return nil
	}

	aStore, err := control.OpenStore(context.Background(), state)
	if err != nil {
		t.Fatal(err)
	}
	ctxA, stopA := context.WithCancel(context.Background())
	doneA, doneB := make(chan struct{}), make(chan struct{})
	defer func() { stopA(); <-doneA }()
	go func() { sup(aStore, "serve-a").Run(ctxA); close(doneA) }()
	first := waitPIDs("serve-a")

	// serve-b waits on the same state: it must not start anything while
	// serve-a's leases are live.
	ctxB, stopB := context.WithCancel(context.Background())
	defer func() { stopB(); <-doneB }()
	go func() { sup(openStore(t, state), "serve-b").Run(ctxB); close(doneB) }()
	time.Sleep(2 * ttl)
	if p := pidsOf("serve-b"); len(p) != 0 {
		t.Fatalf("serve-b started replicas beside serve-a's: %v", p)
	}

	// serve-a loses its store: its children must be gone before its
	// leases expire, and serve-b then takes over.
	cut := time.Now()
	aStore.Close()
	for end := cut.Add(ttl); ; time.Sleep(20 * time.Millisecond) {
		gone := true
		for _, pid := range first {
			gone = gone && !alive(pid)
		}
		if gone {
			t.Logf("serve-a's replicas stopped %s after its store went away (lease TTL %s)", time.Since(cut).Round(time.Millisecond), ttl)
			break
		}
		if time.Now().After(end) {
			t.Fatalf("serve-a's replicas still run when its leases expire: %v", first)
		}
	}
	second := waitPIDs("serve-b")
	for id, pid := range second {
		if pid == first[id] {
			t.Errorf("pipeline %s: the same pid %d", id, pid)
		}
	}
	stopB()
	<-doneB
	for id, pid := range second {
		if alive(pid) {
			t.Errorf("pipeline %s: pid %d still runs after its serve stopped", id, pid)
		}
	}
}
