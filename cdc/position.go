package cdc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/config"
)

// A named position (Config.PositionName) is, on PostgreSQL, a durable
// replication slot, tidemark_pos_<name>, and a checkpoint file,
// <PositionDir>/<name>.json; on MySQL/MariaDB only the file (the binlog
// position and GTID set to resume from; the server keeps its binlog by
// its own retention, and a purged resume point is the named error
// binlog_purged).
//
// The contract (at-least-once): the slot's confirmed position, and the
// file, advance only past transactions every event of which was delivered
// by Next and acknowledged by Ack. A restart with the same name continues
// after the last saved checkpoint, so an event acknowledged after the
// last save, or delivered and not acknowledged, comes again: dedupe on
// Event.Position. A checkpoint is saved at every commit interval (200ms)
// once everything delivered before it is acknowledged. The stream does
// not go past a checkpoint before that: a program that acknowledges in
// batches must Ack before it waits in Next, or Next waits until
// MaxRuntime or the context ends the stream.
//
// The slot keeps the source's WAL from the saved position on while no
// program reads it: DropPosition removes it and the file.

func positionFile(dir, name string) string { return filepath.Join(dir, name+".json") }

func checkPosition(cfg Config) error {
	if err := app.CheckPositionName(cfg.PositionName); err != nil {
		return fmt.Errorf("cdc: PositionName: %w", err)
	}
	if cfg.PositionDir == "" {
		return errors.New("cdc: PositionName needs PositionDir, the directory of its checkpoint file")
	}
	return os.MkdirAll(cfg.PositionDir, 0o755)
}

// acks tracks what was delivered and what acknowledged.
type acks struct {
	mu        sync.Mutex
	delivered int64 // events handed over by Next
	acked     int64 // of them, acknowledged
	changed   chan struct{}
}

// waitAcked waits until every delivered event is acknowledged; when
// stopping closes first it returns app.ErrUnacked.
func (s *Stream) waitAcked(ctx context.Context, stopping <-chan struct{}) error {
	for {
		s.mu.Lock()
		done, ch := s.acks.acked >= s.acks.delivered, s.acks.changed
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-stopping:
			s.mu.Lock()
			done = s.acks.acked >= s.acks.delivered
			s.mu.Unlock()
			if done {
				return nil
			}
			return app.ErrUnacked
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// DropPosition removes a named position: its slot on the source (which
// must not be in use) and its checkpoint file. The next Open with the
// name starts at the source's current position.
func DropPosition(ctx context.Context, cfg Config) error {
	if err := checkPosition(cfg); err != nil {
		return err
	}
	// A MySQL position is only its file: the server keeps nothing for it.
	c := &config.Config{Source: config.NewSecret(cfg.Source)}
	if c.SourceType() != config.SourceMySQL {
		if err := dropSlot(ctx, cfg.Source, app.PositionSlot(cfg.PositionName)); err != nil {
			return err
		}
	}
	if err := os.Remove(positionFile(cfg.PositionDir, cfg.PositionName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cdc: drop position: %w", err)
	}
	return nil
}
