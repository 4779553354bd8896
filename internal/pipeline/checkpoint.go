package pipeline

import (
	"time"

	"github.com/tidemark/tidemark/internal/change"
)

// Checkpoint is the source-wide position that has been made durable in the
// lake: every table holds every change of every transaction up to Pos.
type Checkpoint struct {
	// Pos is the commit position of the last transaction fully durable
	// (PostgreSQL: its commit LSN).
	Pos uint64
	// Resume is the source's opaque token to resume after that
	// transaction (PostgreSQL: its end LSN, in decimal; MySQL: GTID set and
	// file:pos). Only the source that wrote it reads it.
	Resume string
	// Watermark is that transaction's commit time: the source is captured
	// up to here. Zero when unknown.
	Watermark time.Time
	// Info holds facts about the source for status and tools (PostgreSQL:
	// slot, wal-end, acked-lsn). Keys are lowercase words joined by '-'.
	// Written once, then only read: a checkpoint handed to a Sink may be
	// read by its background flush.
	Info map[string]string
}

// InfoSource is the Info key naming the kind of source that wrote a
// checkpoint ("postgres", "mysql"): status and tools pick the source's
// position format by it. A checkpoint without it is PostgreSQL's (lakes
// written before it).
const InfoSource = "source"

// TableState is what the lake holds about one table.
type TableState struct {
	// Cursor is the highest (commit position, seq) committed; replayed
	// changes at or below it are skipped.
	Cursor change.Position
	// Props are the tidemark.* properties of the table's latest commit,
	// and the table's recorded column ids (PropColumnIDs) when it has some.
	Props map[string]string
}
