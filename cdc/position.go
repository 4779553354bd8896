package cdc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/tidemark/tidemark/internal/app"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// A named position (Config.PositionName) is a durable replication slot,
// tidemark_pos_<name>, and a checkpoint file, <PositionDir>/<name>.json.
//
// The contract (at-least-once): the slot's confirmed position, and the
// file, advance only past transactions every event of which was delivered
// by Next and acknowledged by Ack. A restart with the same name continues
// after the last saved checkpoint, so an event acknowledged after the
// last save, or delivered and not acknowledged, comes again: dedupe on
// Event.Position. A checkpoint is saved at every commit interval (200ms)
// once everything delivered before it is acknowledged; the stream waits
// for the acknowledgement of what it delivered before it goes on past a
// checkpoint, so Ack each event before asking Next for much more.
//
// The slot keeps the source's WAL from the saved position on while no
// program reads it: DropPosition removes it and the file.

var positionName = regexp.MustCompile(`^[a-z0-9_]{1,40}$`)

func positionSlot(name string) string { return "tidemark_pos_" + name }

func positionFile(dir, name string) string { return filepath.Join(dir, name+".json") }

func checkPosition(cfg Config) error {
	if !positionName.MatchString(cfg.PositionName) {
		return fmt.Errorf("cdc: PositionName %q: want 1 to 40 of a-z, 0-9, _", cfg.PositionName)
	}
	if cfg.PositionDir == "" {
		return errors.New("cdc: PositionName needs PositionDir, the directory of its checkpoint file")
	}
	return os.MkdirAll(cfg.PositionDir, 0o755)
}

// fileStore is the app.TailStore of a named position: a JSON file of the
// checkpoint, replaced atomically, saved once the stream's deliveries are
// acknowledged.
type fileStore struct {
	path string
	s    *Stream
}

var _ app.TailStore = (*fileStore)(nil)

func (f *fileStore) Load(context.Context) (pipeline.Checkpoint, bool, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return pipeline.Checkpoint{}, false, nil
	}
	if err != nil {
		return pipeline.Checkpoint{}, false, fmt.Errorf("cdc: read position file: %w", err)
	}
	var cp pipeline.Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return pipeline.Checkpoint{}, false, fmt.Errorf("cdc: position file %s is damaged: %w", f.path, err)
	}
	return cp, true, nil
}

func (f *fileStore) Save(ctx context.Context, stopping <-chan struct{}, cp pipeline.Checkpoint) error {
	if err := f.s.waitAcked(ctx, stopping); err != nil {
		return err
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	tmp := f.path + ".tmp"
	w, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("cdc: save position: %w", err)
	}
	if _, err := w.Write(b); err != nil {
		w.Close()
		return fmt.Errorf("cdc: save position: %w", err)
	}
	if err := w.Sync(); err != nil {
		w.Close()
		return fmt.Errorf("cdc: save position: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("cdc: save position: %w", err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		return fmt.Errorf("cdc: save position: %w", err)
	}
	if d, err := os.Open(filepath.Dir(f.path)); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("cdc: save position: %w", err)
		}
	}
	return nil
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
	if err := dropSlot(ctx, cfg.Source, positionSlot(cfg.PositionName)); err != nil {
		return err
	}
	if err := os.Remove(positionFile(cfg.PositionDir, cfg.PositionName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cdc: drop position: %w", err)
	}
	return nil
}
