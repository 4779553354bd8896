package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/event"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres"
	"github.com/tidemark/tidemark/internal/transport/kafka"
)

// runToKafka is Run with sink: kafka://: the capture publishes to Kafka
// (transport/kafka.Sink) instead of writing the lake; no silver, no
// maintenance. Sessions are retried as Run retries them.
func runToKafka(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	src, err := sourceFor(cfg.Source.Reveal())
	if err != nil {
		return err
	}
	newCapture, err := src.open(cfg, log)
	if err != nil {
		return err
	}
	evOpts, err := eventOptions(ctx, cfg, src)
	if err != nil {
		if stoppedBeforeStart(ctx, err) {
			return nil
		}
		return err
	}
	reg := prometheus.NewRegistry()
	met := newMetrics(reg, cfg.Name, int64(cfg.MemoryBudget))
	if cfg.MetricsAddr != "" {
		if err := serveMetrics(ctx, cfg.MetricsAddr, reg, log); err != nil {
			return err
		}
	}
	opts := kafka.Options{
		Brokers: cfg.KafkaBrokers(), Prefix: cfg.TopicPrefix, Name: cfg.Name,
		Partitions: int32(cfg.Kafka.Partitions), ReplicationFactor: int16(cfg.Kafka.ReplicationFactor),
		Retention: time.Duration(cfg.Kafka.Retention), MinRetention: time.Duration(cfg.Kafka.MinRetention),
		MaxMessageBytes: int(cfg.Kafka.MaxMessageBytes), SendTimeout: time.Duration(cfg.Kafka.SendTimeout),
		MaxBufferedBytes: 2 * int64(cfg.CommitBytes), Event: evOpts,
	}
	retry := newRetrier(cfg, met, log)
	live := watchLogEnd(ctx, src, cfg.Source.Reveal())
	log.Info("tidemark starting", "source", cfg.Name, "sink", "kafka", "brokers", strings.Join(opts.Brokers, ","), "topic_prefix", opts.Prefix)
	var lastLog time.Time
	for {
		sink, err := kafka.New(ctx, opts, log)
		if err != nil {
			if stoppedBeforeStart(ctx, err) {
				return nil
			}
			if again, err := retry.after(ctx, err); !again {
				return err
			}
			continue
		}
		onProgress := func(cp pipeline.Checkpoint) {
			lag := live.lag(src, cp)
			met.progress(cp, lag)
			retry.progress()
			if time.Since(lastLog) >= 10*time.Second {
				confirmed, _ := src.position(cp, 0)
				log.Info("capture progress", "sink", "kafka", "confirmed_lsn", confirmed, "lag_bytes", max(lag, 0),
					"lag_seconds", lagSeconds(cp.Watermark))
				lastLog = time.Now()
			}
		}
		capt := newCapture(sink, onProgress)
		met.sessions.Inc()
		err = capt.Run(ctx)
		capt.Close()
		sink.Close()
		if again, err := retry.after(ctx, err); !again {
			return err
		}
	}
}

// eventOptions are the Debezium envelope's source block settings of cfg's
// source: its connector, database and (MySQL) binlog file names; the
// events' name (Debezium's topic.prefix) is the topic prefix.
func eventOptions(ctx context.Context, cfg *config.Config, src *source) (event.Options, error) {
	o := event.Options{Shape: event.Debezium, Connector: src.connector, Name: cfg.TopicPrefix, Version: "tidemark"}
	switch src.name {
	case "postgres":
		d, err := postgres.NewDialer(cfg.Source.Reveal(), config.RedactURL)
		if err != nil {
			return o, err
		}
		o.Database = d.Database()
	case "mysql":
		mo, err := mysqlOptions(cfg)
		if err != nil {
			return o, err
		}
		o.Database = mo.Database
		o.Binlog = mysqlBinlog(mysqlBinlogBase(ctx, mo.DSN()))
	default:
		return o, fmt.Errorf("the Kafka sink does not know source %s", src.name)
	}
	return o, nil
}
