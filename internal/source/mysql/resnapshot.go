package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// The source side of `tidemark resnapshot --all` for a pipeline that can
// no longer resume from its checkpoint (binlog_purged, server_changed, an
// unreadable resume token): every table is read again, and the checkpoint
// is reset to the server's current binlog position, as a first start
// records it.

// ResumeProblem returns why a pipeline with checkpoint cp (have: it has
// one) cannot resume on the server of opts: the named error a start would
// stop with (binlog_purged, server_changed, corrupt_state), or nil.
func ResumeProblem(ctx context.Context, opts Options, cp pipeline.Checkpoint, have bool) error {
	if !have {
		return nil
	}
	db, err := sql.Open("mysql", opts.DSN())
	if err != nil {
		return fmt.Errorf("mysql source: %w", err)
	}
	defer db.Close()
	if cp.Resume == "" {
		return nil // resumed from its position (startPoint); checked there
	}
	r, err := ParseResume(cp.Resume)
	if err != nil {
		return fault.With(fault.ErrCorruptState, "the checkpoint's resume token cannot be read; refusing to guess a position", err)
	}
	return CheckResume(ctx, db, r)
}

// StartCheckpoint returns the checkpoint of the server's current binlog
// position (its GTID set and file:pos naming the same point), with
// watermark wm, and that position as file:pos.
func StartCheckpoint(ctx context.Context, opts Options, wm time.Time) (pipeline.Checkpoint, string, error) {
	db, err := sql.Open("mysql", opts.DSN())
	if err != nil {
		return pipeline.Checkpoint{}, "", fmt.Errorf("mysql source: %w", err)
	}
	defer db.Close()
	c := &Capture{opts: opts, db: db}
	if c.info, err = Preflight(ctx, db); err != nil {
		return pipeline.Checkpoint{}, "", err
	}
	c.flavor = c.info.Flavor
	if opts.Flavor != "" {
		c.flavor = opts.Flavor
	}
	cur := c.info.Position()
	c.basename = cur.File[:max(strings.LastIndexByte(cur.File, '.'), 0)]
	r, err := c.consistentStart(ctx)
	if err != nil {
		return pipeline.Checkpoint{}, "", err
	}
	return c.checkpoint(r, binlogPos{r.File, r.Pos}.LSN(), wm), describeResume(r), nil
}
