package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/gold"
	"github.com/tidemark/tidemark/internal/lake"
)

// goldSpecs are the gold tables cfg declares.
func goldSpecs(cfg *config.Config) []gold.Spec {
	out := make([]gold.Spec, len(cfg.Gold))
	for i, g := range cfg.Gold {
		out[i] = gold.Spec{Name: g.Name, SQL: g.SQL, Every: g.Every.Std()}
	}
	return out
}

// GoldOptions are the refresh options of cfg: gold's share of the budget,
// a working directory beside the capture's spool, one DuckDB thread (the
// capture and silver need the others).
func GoldOptions(cfg *config.Config, exclusive sync.Locker) gold.Options {
	return gold.Options{
		Source:      cfg.Name,
		Warehouse:   cfg.Warehouse,
		TempDir:     spoolDir(cfg) + "-gold",
		MemoryLimit: int64(cfg.MemoryBudget / config.GoldShare),
		Threads:     1,
		Exclusive:   exclusive,
	}
}

// checkGold checks every gold table of cfg against the lake (gold.Check);
// the errors, joined, are configuration errors naming each table.
func checkGold(ctx context.Context, r *gold.Refresher, specs []gold.Spec) error {
	var errs []error
	for _, s := range specs {
		if _, err := r.Check(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// goldPoll is how often tidemark run looks for silver tables that moved
// (after_each_silver_merge) and for refreshes that are due: silver.every,
// within [1s, 30s].
func goldPoll(cfg *config.Config) time.Duration {
	return min(max(time.Duration(cfg.Silver.Every), time.Second), 30*time.Second)
}

// goldBackoff is the wait before the next refresh of a table whose last n
// refreshes failed: 30s, doubling, at most 10m.
func goldBackoff(n int) time.Duration {
	d := 30 * time.Second
	for i := 1; i < n && d < 10*time.Minute; i++ {
		d *= 2
	}
	return min(d, 10*time.Minute)
}

// runGold keeps the gold tables current until ctx is done: a table with
// every: is refreshed on that schedule, the others whenever a silver table
// they read has a new snapshot. A failed refresh is logged with its named
// error, recorded for status and retried after a backoff; it never stops
// the pipeline (the table keeps its previous version).
func runGold(ctx context.Context, r *gold.Refresher, specs []gold.Spec, poll time.Duration, met *metrics, log *slog.Logger) {
	next := make(map[string]time.Time, len(specs))
	fails := map[string]int{}
	waitingLogged := map[string]string{}
	for {
		now := time.Now()
		wake := now.Add(poll)
		for _, s := range specs {
			if ctx.Err() != nil {
				return
			}
			if t := next[s.Name]; now.Before(t) {
				wake = minTime(wake, t)
				continue
			}
			start := time.Now()
			res, err := r.Refresh(ctx, s, false)
			if ctx.Err() != nil {
				return
			}
			if err != nil || (res.Waiting == "" && !res.Unchanged) {
				met.goldRefreshed(s.Name, res.Rows, time.Since(start), err)
			}
			switch {
			case err != nil:
				fails[s.Name]++
				retry := goldBackoff(fails[s.Name])
				next[s.Name] = time.Now().Add(retry)
				attrs := []any{"table", res.Table, "error", err.Error(), "retry_in", retry.String()}
				var fe *fault.Error
				if errors.As(err, &fe) && fe.Code != "" {
					attrs = append(attrs, "code", fe.Code)
				}
				log.Warn("gold refresh failed; the table keeps its previous version", attrs...)
			case res.Waiting != "":
				if waitingLogged[s.Name] != res.Waiting {
					log.Info("gold table waits", "table", res.Table, "reason", res.Waiting)
					waitingLogged[s.Name] = res.Waiting
				}
			default:
				fails[s.Name] = 0
				if s.Every > 0 {
					next[s.Name] = now.Add(s.Every)
				}
			}
			if t := next[s.Name]; t.After(now) {
				wake = minTime(wake, t)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(wake)):
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// startGold checks cfg's gold tables against the lake and starts keeping
// them current beside the capture; done waits for it to stop (after ctx
// is). A table the check rejects is a configuration error, returned
// before anything runs.
func startGold(ctx context.Context, cat lake.Catalog, cfg *config.Config, exclusive sync.Locker, met *metrics, log *slog.Logger) (done func(), err error) {
	if len(cfg.Gold) == 0 || !cfg.Silver.IsEnabled() {
		return func() {}, nil
	}
	opts := GoldOptions(cfg, exclusive)
	gold.RemoveStale(opts, log)
	r := gold.NewRefresher(cat, opts, log)
	specs := goldSpecs(cfg)
	if err := checkGold(ctx, r, specs); err != nil {
		return nil, err
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if perr := fault.Guard("gold refresh", func() error {
			runGold(ctx, r, specs, goldPoll(cfg), met, log)
			return nil
		})(); perr != nil {
			log.Error("gold refreshes stopped by a bug; the pipeline goes on", "error", perr.Error())
		}
	}()
	return func() { <-stopped }, nil
}

// GoldRefresh refreshes the gold table name of cfg once, whether or not
// silver moved, and prints what it read: `tidemark gold refresh`.
func GoldRefresh(ctx context.Context, cfg *config.Config, name string, out io.Writer, log *slog.Logger) (err error) {
	defer func() { err = config.RedactError(err, cfg.Secrets()...) }()
	g, ok := cfg.Gold.Named(name)
	if !ok {
		var names []string
		for _, t := range cfg.Gold {
			names = append(names, t.Name)
		}
		return fault.With(fault.ErrBadConfig, fmt.Sprintf("gold refresh: no gold table %q in the configuration (gold: declares %s)", name, dash(strings.Join(names, ", "))), nil)
	}
	defer applyMemoryLimit(cfg, log)()
	cat, err := OpenLake(ctx, cfg)
	if err != nil {
		return err
	}
	defer cat.Close()
	r := gold.NewRefresher(cat, GoldOptions(cfg, nil), log)
	spec := gold.Spec{Name: g.Name, SQL: g.SQL, Every: g.Every.Std()}
	if _, err := r.Check(ctx, spec); err != nil {
		return err
	}
	res, err := r.Refresh(ctx, spec, true)
	if err != nil {
		return err
	}
	if res.Waiting != "" {
		return fault.With(fault.ErrGoldRefreshFailed, fmt.Sprintf("gold table %s: not refreshed: %s; run again once it is", res.Table, res.Waiting), nil)
	}
	_, err = fmt.Fprintf(out, "%s refreshed: %d rows, mode %s, from %s\n", res.Table, res.Rows, res.Mode, showReads(res.Reads))
	return err
}

func showReads(reads []gold.Read) string {
	parts := make([]string, len(reads))
	for i, rd := range reads {
		parts[i] = fmt.Sprintf("%s (snapshot %d, position %s)", rd.Table, rd.Snapshot, dash(rd.Position))
	}
	return strings.Join(parts, ", ")
}

// GoldStatus is one gold table's state, as `tidemark status` prints it.
type GoldStatus struct {
	// Mode is how the table is refreshed: incremental (its query
	// decomposes) or full. LastMode is how its current snapshot was
	// computed, WhyFull why that was a full recompute.
	Mode     string `json:"mode"`
	LastMode string `json:"last_mode,omitempty"`
	WhyFull  string `json:"why_full,omitempty"`
	// RefreshedAt is the time of the table's current snapshot (empty: never
	// refreshed); Rows its rows.
	RefreshedAt string `json:"refreshed_at,omitempty"`
	Rows        int64  `json:"rows"`
	// Position and Watermark are the lowest of the silver tables read: the
	// table reflects every source change up to them.
	Position  string `json:"position,omitempty"`
	Watermark string `json:"watermark,omitempty"`
	// Reads are the silver tables the current snapshot was computed from.
	Reads []gold.Read `json:"reads"`
	// LastAttempt and LastError are of the last refresh tried (LastError
	// empty: it succeeded), with Failures in a row.
	LastAttempt string `json:"last_attempt,omitempty"`
	LastError   string `json:"last_error,omitempty"`
	// LastErrorCode names LastError (gold_refresh_failed, gold_invalid, …).
	LastErrorCode string `json:"last_error_code,omitempty"`
	Failures      int    `json:"failures,omitempty"`
}

// goldStatuses returns the status rows of source's gold tables: those in
// the catalog, and those whose refreshes so far all failed.
func goldStatuses(ctx context.Context, cat lake.Catalog, warehouse, source string, src *source) ([]TableStatus, error) {
	idents, err := cat.ListTables(ctx, []string{"gold", source})
	if err != nil && !errors.Is(err, lake.ErrNoSuchNamespace) {
		return nil, err
	}
	states := gold.States(warehouse, source)
	byName := map[string]*GoldStatus{}
	var names []string
	for _, id := range idents {
		t, err := cat.Open(ctx, id)
		if err != nil {
			return nil, err
		}
		name := id[len(id)-1]
		gs := &GoldStatus{Mode: gold.ModeFull, Rows: -1}
		if snap, ok := t.CurrentSnapshot(); ok {
			sum := t.Summary()
			gs.RefreshedAt = time.UnixMilli(snap.TimestampMs).UTC().Format(time.RFC3339)
			gs.Reads = gold.Reads(sum)
			gs.LastMode, gs.WhyFull = sum[gold.PropMode], sum[gold.PropWhyFull]
			if m := sum[gold.PropPlan]; m != "" {
				gs.Mode = m
			}
			if n, err := strconv.ParseInt(sum["total-records"], 10, 64); err == nil {
				gs.Rows = n
			} else {
				// Delta keeps no row count in its commits; a gold table
				// is an aggregate, small enough to count.
				var n int64
				if err := t.Scan(ctx, func(rec arrow.RecordBatch) error { n += rec.NumRows(); return nil }); err == nil {
					gs.Rows = n
				}
			}
			if p, err := strconv.ParseUint(sum[gold.PropPosition], 10, 64); err == nil && p > 0 {
				gs.Position = src.formatPos(p)
			}
			gs.Watermark = sum[gold.PropWatermark]
		}
		byName[name] = gs
		names = append(names, name)
	}
	for name, st := range states {
		gs, ok := byName[name]
		if !ok {
			gs = &GoldStatus{Mode: gold.ModeFull, Rows: -1}
			byName[name] = gs
			names = append(names, name)
		}
		gs.LastAttempt = st.LastAttempt.Format(time.RFC3339)
		if st.Error != "" {
			gs.LastError, gs.LastErrorCode, gs.Failures = st.Error, st.Code, st.Failures
		}
	}
	sort.Strings(names)
	var out []TableStatus
	for _, n := range names {
		out = append(out, TableStatus{Table: strings.Join(gold.Ident(source, n), "."), Snapshot: "-", SnapshotEstimate: -1,
			LagBytes: -1, LagSeconds: -1, Silver: "-", BronzeRows: -1, Gold: byName[n]})
	}
	return out, nil
}

// printGold prints the gold rows of a status as their own table.
func printGold(out io.Writer, rows []TableStatus) error {
	var gs []TableStatus
	for _, r := range rows {
		if r.Gold != nil {
			gs = append(gs, r)
		}
	}
	if len(gs) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nGOLD TABLE\tMODE\tREFRESHED\tROWS\tPOSITION\tREADS\tLAST_ERROR")
	for _, r := range gs {
		g := r.Gold
		var reads []string
		for _, rd := range g.Reads {
			reads = append(reads, fmt.Sprintf("%s@%d", rd.Table, rd.Snapshot))
		}
		errCell := "-"
		if g.LastError != "" {
			code := ""
			if g.LastErrorCode != "" {
				code = "[" + g.LastErrorCode + "] "
			}
			errCell = fmt.Sprintf("%s%s (%d in a row, last at %s)", code, fault.OneLine(g.LastError), g.Failures, g.LastAttempt)
		}
		mode := g.Mode
		switch {
		case g.Mode == gold.ModeFull && g.WhyFull != "":
			mode += " (" + g.WhyFull + ")"
		case g.LastMode != "" && g.LastMode != g.Mode:
			mode += " (last refresh " + g.LastMode + ": " + dash(g.WhyFull) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Table, mode, dash(g.RefreshedAt), num(g.Rows), dash(g.Position),
			dash(strings.Join(reads, ",")), errCell)
	}
	return tw.Flush()
}
