package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ServeOptions configure `tidemark serve`.
type ServeOptions struct {
	// State is a directory (embedded SQLite) or a postgres:// URL.
	State string
	// Addr is the API's listen address (loopback by default).
	Addr string
	// DataDir holds the lakes (DataDir/lake/<org>/<project>/<env>/<pipeline>)
	// and the children's rendered configs and logs (DataDir/run).
	DataDir string
	// AdminTokenFile: the admin token is read from it, or created into it
	// (mode 0600) when it does not exist.
	AdminTokenFile string
	// Bin is the tidemark binary children run (default: this executable).
	Bin string

	LeaseTTL, Poll               time.Duration
	RestartInitial, RestartMax   time.Duration
	TriggerInitial, TriggerMax   time.Duration
	TriggerClaimTTL, StopTimeout time.Duration
	// Ready, if set, receives the API's bound address once it serves.
	Ready func(addr string)
}

// Defaults fills zero options with the production defaults.
func (o *ServeOptions) Defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.State == "" {
		o.State = "./tidemark-state"
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:7878"
	}
	if o.DataDir == "" {
		o.DataDir = "./tidemark-data"
	}
	def(&o.LeaseTTL, 15*time.Second)
	def(&o.Poll, time.Second)
	def(&o.RestartInitial, time.Second)
	def(&o.RestartMax, time.Minute)
	def(&o.TriggerInitial, 30*time.Second)
	def(&o.TriggerMax, 30*time.Minute)
	def(&o.TriggerClaimTTL, 2*time.Minute)
	def(&o.StopTimeout, time.Minute)
}

// Serve runs the control plane until ctx ends: the API, the supervisor of
// the declared pipelines and the trigger deliverer.
func Serve(ctx context.Context, o ServeOptions, log *slog.Logger) error {
	o.Defaults()
	if o.Bin == "" {
		var err error
		if o.Bin, err = os.Executable(); err != nil {
			return err
		}
	}
	data, err := filepath.Abs(o.DataDir)
	if err != nil {
		return err
	}
	runDir := filepath.Join(data, "run")
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return fmt.Errorf("data directory %s: %w", data, err)
	}
	st, err := OpenStore(ctx, o.State)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := bootstrapAdmin(ctx, st, o.adminTokenFile(st)); err != nil {
		return err
	}
	holder := hostName() + "-" + fmt.Sprint(os.Getpid()) + "-" + randomID(4)
	layout := Layout{LakeRoot: filepath.Join(data, "lake")}
	api := &API{Store: st, Layout: layout, Log: log, CheckDir: runDir, PruneWait: o.StopTimeout + o.LeaseTTL + 10*time.Second}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", o.Addr, err)
	}
	srv := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 10 * time.Second}
	sup := &Supervisor{Store: st, Holder: holder, Log: log, Bin: o.Bin, RunDir: runDir, LeaseTTL: o.LeaseTTL, Poll: o.Poll,
		RestartInitial: o.RestartInitial, RestartMax: o.RestartMax, StopTimeout: o.StopTimeout}
	del := &Deliverer{Store: st, Holder: holder, Log: log, Client: &http.Client{}, InitialBackoff: o.TriggerInitial,
		MaxBackoff: o.TriggerMax, ClaimTTL: o.TriggerClaimTTL}
	log.Info("tidemark serve starting", "addr", ln.Addr().String(), "state", redactState(o.State), "data", data, "holder", holder)
	done := make(chan struct{}, 2)
	go func() { sup.Run(ctx); done <- struct{}{} }()
	go func() { del.Run(ctx, o.Poll); done <- struct{}{} }()
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	if o.Ready != nil {
		o.Ready(ln.Addr().String())
	}
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = srv.Shutdown(sctx)
	cancel()
	<-done
	<-done
	log.Info("tidemark serve stopped")
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (o ServeOptions) adminTokenFile(st *Store) string {
	if o.AdminTokenFile != "" {
		return o.AdminTokenFile
	}
	if st.Dir != "" {
		return filepath.Join(st.Dir, "admin-token")
	}
	return "tidemark-admin-token"
}

// bootstrapAdmin makes sure the admin token in path is known to the store,
// creating one into path (0600) when the file does not exist.
func bootstrapAdmin(ctx context.Context, st *Store, path string) error {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return fmt.Errorf("admin token file %s is empty", path)
		}
		return st.AddTokenHash(ctx, "admin", Scope{}, HashToken(tok))
	case errors.Is(err, os.ErrNotExist):
		tok := "tmk_" + randomID(32)
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			return fmt.Errorf("admin token file: %w", err)
		}
		return st.AddTokenHash(ctx, "admin", Scope{}, HashToken(tok))
	default:
		return fmt.Errorf("admin token file: %w", err)
	}
}

func redactState(s string) string {
	if strings.Contains(s, "://") {
		return fmt.Sprint(configSecret(s))
	}
	return s
}

func hostName() string {
	h, err := os.Hostname()
	if err != nil {
		return "serve"
	}
	return h
}
