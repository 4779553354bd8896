package app

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/transport/kafka"
)

// Load is `tidemark load`: it reads the topics a `tidemark run --sink
// kafka://` publishes (cfg.From, cfg.TopicPrefix) into bronze, and merges
// silver beside it, exactly as Run does from the source: the same tables,
// named after the capture's pipeline (its checkpoint record's name, unless
// cfg.Name is given). It runs until ctx is cancelled (a clean stop: flush
// and commit) or an error that is not transient.
func Load(ctx context.Context, cfg *config.Config, log *slog.Logger) (err error) {
	defer func() { err = config.RedactError(err, cfg.Secrets()...) }()
	defer fault.Recover("load", &err)
	defer applyMemoryLimit(cfg, log)()
	RegisterClassifiers()
	lo := kafka.LoadOptions{
		Brokers: cfg.LoadBrokers(), Prefix: cfg.TopicPrefix, Group: cfg.Group,
		CommitInterval: time.Duration(cfg.CommitInterval), CommitBytes: int64(cfg.CommitBytes),
		MaxElapsed: time.Duration(cfg.Retry.MaxElapsed),
	}
	loader, err := kafka.NewLoader(lo, log)
	if err != nil {
		return err
	}
	defer loader.Close()
	up, err := loader.WaitUpstream(ctx)
	if err != nil {
		if stoppedBeforeStart(ctx, err) {
			return nil
		}
		return err
	}
	c := *cfg
	if c.Name == "" {
		c.Name = up.Name
	}
	if !config.ValidName(c.Name) {
		return fault.With(fault.ErrBadConfig, "the capture's checkpoint in topic "+cfg.TopicPrefix+"."+kafka.CheckpointTopic+" names pipeline "+c.Name+", which is not a tidemark name: pass --name", nil)
	}
	return runLake(ctx, &c, log, func(ctx context.Context, lr *lakeRun) error { return loadToLake(ctx, &c, lr, loader, up, log) })
}

// loadToLake is Load's writer: loader sessions into bronze, retried as
// transient errors allow.
func loadToLake(ctx context.Context, cfg *config.Config, lr *lakeRun, loader *kafka.Loader, up kafka.Upstream, log *slog.Logger) error {
	retry := newRetrier(cfg, lr.met, log)
	slot := up.Checkpoint.Info[postgres.InfoSlot]
	log.Info("tidemark load starting", "pipeline", cfg.Name, "warehouse", cfg.Warehouse, "brokers", strings.Join(cfg.LoadBrokers(), ","),
		"topic_prefix", cfg.TopicPrefix, "group", cfg.Group)
	var lastLog time.Time
	for {
		w, err := bronze.NewWriter(ctx, lr.cat, cfg.Name, slot, log)
		if err != nil {
			if stoppedBeforeStart(ctx, err) {
				return nil
			}
			return err
		}
		w.KeepReplays()
		w.Observe(lr.met)
		onDurable := func(cp pipeline.Checkpoint) {
			if lr.merger != nil {
				lr.merger.Wake()
			}
			lr.met.progress(cp, -1)
			retry.progress()
			if time.Since(lastLog) >= 10*time.Second {
				log.Info("load progress", "rows_committed", w.Committed(), "source_position", postgres.FormatLSN(cp.Pos),
					"lag_seconds", lagSeconds(cp.Watermark), "offsets", kafka.Position(cp))
				lastLog = time.Now()
			}
		}
		lr.met.sessions.Inc()
		// One loader writes the lake at a time: the others of the group
		// wait for its hold.
		held, release, err := loader.Hold(ctx)
		if err != nil {
			w.Close()
			if again, err := retry.after(ctx, err); !again {
				return err
			}
			continue
		}
		err = loader.Run(held, up, kafka.Session{Sink: w, OnDurable: onDurable, OnLag: lr.met.loadLagged,
			TableProps: func(ctx context.Context, id change.TableID) (map[string]string, bool, error) {
				return bronze.Props(ctx, lr.cat, cfg.Name, id)
			}})
		w.Close()
		release()
		if again, err := retry.after(ctx, err); !again {
			return err
		}
	}
}

var _ kafka.LoadSink = (*bronze.Writer)(nil)
