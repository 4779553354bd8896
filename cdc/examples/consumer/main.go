// Command consumer is an example program that embeds tidemark: it prints
// the changes of a PostgreSQL database as JSON lines (the tidemark shape)
// on stdout, acknowledging each once printed, and with -position it keeps
// a named position, so that after a crash (even SIGKILL) a restart with
// the same -position continues where it was: every change at least once,
// exactly once after deduplication on the position (source.lsn,
// source.seq).
//
//	CDC_SOURCE=postgres://user:password@host:5432/db \
//	    consumer -position orders -dir ./positions -max-runtime 1m -poll-timeout 10s
//
// The source URL comes from the environment, not the command line, where
// other users of the machine could read its password. It prints "ready"
// on stderr once the stream is open.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tidemark/tidemark/cdc"
)

func main() {
	var cfg cdc.Config
	var tables string
	flag.StringVar(&cfg.PositionName, "position", "", "named position to keep and resume from (empty: ephemeral)")
	flag.StringVar(&cfg.PositionDir, "dir", "positions", "directory of the position's checkpoint file")
	flag.StringVar(&tables, "tables", "", "comma-separated schema.table names (empty: all)")
	flag.IntVar(&cfg.MaxRecords, "max-records", 0, "stop after N events (0: no limit)")
	flag.DurationVar(&cfg.MaxRuntime, "max-runtime", 0, "stop after this long (0: no limit)")
	flag.DurationVar(&cfg.PollTimeout, "poll-timeout", 0, "stop once this long passes without an event (0: never)")
	flag.StringVar(&cfg.Format, "format", "tidemark", "shape of the printed events: tidemark, debezium, beam")
	flag.Parse()
	cfg.Source = os.Getenv("CDC_SOURCE")
	if tables != "" {
		cfg.Tables = strings.Split(tables, ",")
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg cdc.Config) error {
	s, err := cdc.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintln(os.Stderr, "ready")
	out := bufio.NewWriter(os.Stdout)
	for {
		ev, err := s.Next(ctx)
		if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
			return out.Flush()
		}
		if err != nil {
			return err
		}
		out.Write(ev.JSON)
		out.WriteByte('\n')
		// Printed (handed to the OS) before acknowledged: a crash after
		// this point loses nothing the position has passed.
		if err := out.Flush(); err != nil {
			return err
		}
		if err := s.Ack(ev); err != nil {
			return err
		}
	}
}
