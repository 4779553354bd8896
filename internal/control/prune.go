package control

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/config"
)

// prune drops what a removed pipeline left (apply --prune), once no
// replica of it runs: its replication slot and publication on a
// PostgreSQL source and its warehouse (the lake tables). Kafka topics are
// not deleted (listed as left behind). It waits for the pipeline's lease
// to be released or to expire (the supervisor holding it stops the child
// within a poll), up to wait.
func (a *API) prune(ctx context.Context, c *Change, wait time.Duration) {
	for end := time.Now().Add(wait); ; {
		held, err := a.Store.leaseLive(ctx, c.ID)
		if err != nil {
			c.PruneError = err.Error()
			return
		}
		if !held {
			break
		}
		if time.Now().After(end) {
			c.PruneError = fmt.Sprintf("the pipeline still runs after %s (its serve holds the lease): nothing pruned; apply --prune again", wait)
			return
		}
		select {
		case <-ctx.Done():
			c.PruneError = ctx.Err().Error()
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	f, err := os.CreateTemp(a.CheckDir, "prune-*.yaml")
	if err != nil {
		c.PruneError = err.Error()
		return
	}
	defer os.Remove(f.Name())
	_, _ = f.Write(c.rendered)
	f.Close()
	cfg, err := config.Load(f.Name())
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		c.PruneError = "reading its config: " + config.RedactURL(strings.ReplaceAll(err.Error(), f.Name(), "rendered config"))
		return
	}
	var left, errs []string
	if cfg.SourceType() == config.SourcePostgres {
		if err := dropSlot(ctx, cfg.Source, cfg.Slot, cfg.Publication); err != nil {
			errs = append(errs, err.Error())
			left = append(left, "replication slot "+cfg.Slot+" and publication "+cfg.Publication+" on the source")
		}
	}
	wh := filepath.Clean(cfg.Warehouse)
	if root := filepath.Clean(a.Layout.LakeRoot) + string(filepath.Separator); strings.HasPrefix(wh, root) {
		if err := os.RemoveAll(wh); err != nil {
			errs = append(errs, err.Error())
			left = append(left, "lake tables in "+wh)
		}
	} else {
		left = append(left, "lake tables in "+wh+" (outside the lake root: not removed)")
	}
	for _, l := range c.LeftBehind {
		if strings.HasPrefix(l, "Kafka topics") {
			left = append(left, l)
		}
	}
	c.LeftBehind = left
	c.Pruned = len(errs) == 0
	if len(errs) > 0 {
		c.PruneError = strings.Join(errs, "; ")
	}
}

// dropSlot drops a pipeline's slot and publication (both if they exist).
func dropSlot(ctx context.Context, src config.Secret, slot, pub string) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, src.Reveal())
	if err != nil {
		return config.RedactError(fmt.Errorf("prune: connect to the source: %w", err), src)
	}
	defer conn.Close(context.Background())
	// The walsender of a just-stopped child may still hold the slot a moment.
	for i := 0; ; i++ {
		_, err = conn.Exec(cctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil || i == 50 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return config.RedactError(fmt.Errorf("prune: drop replication slot %s: %w", slot, err), src)
	}
	if _, err := conn.Exec(cctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{pub}.Sanitize()); err != nil {
		return config.RedactError(fmt.Errorf("prune: drop publication %s: %w", pub, err), src)
	}
	return nil
}

// leaseLive says whether someone holds the pipeline's lease unexpired.
func (s *Store) leaseLive(ctx context.Context, id string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM tm_leases WHERE pipeline_id = ? AND expires_ms >= ?`), id, nowMS()).Scan(&n)
	return n > 0, err
}
