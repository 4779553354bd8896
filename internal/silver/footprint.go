package silver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/internal/lake"
)

// A silver table compacts itself: after a merge step, the merger measures
// the table (lake.Maintained.Footprint, manifests only) and, when the table
// passed its bounds, compacts it before the next step. Done here rather
// than by `tidemark maintain` on a clock, because a merge that commits
// between a compaction's read and its commit cancels the compaction
// (every merge deletes rows): a separate maintainer loses to a table
// merged every few seconds, silver's own loop never does. A compaction
// keeps every tidemark.* key of the head (the cursor), and reads the same
// rows, so replay, the cursor and "highest position wins" are untouched.
//
// Measured (a 20,000-row table updated at 2,000 rows/s for two minutes,
// --silver-every 5s, 16 buckets, merge-on-read; docs/operations.md): every
// step touches every bucket, so each writes 16 data and 16 delete files;
// deletes are already written only for the buckets that have some. The
// file count and the bytes grow with the number of steps, whatever the
// size of each: only compaction bounds them, and a clock of 10 minutes
// lets 120 steps through. Compacting by the table's own footprint keeps
// both bounded by a constant of the table.

// RatioBound is the most bytes a silver table's files take, in multiples
// of its live rows' bytes, at any commit: above it `tidemark status` warns.
const RatioBound = 3

// CompactRatio: a silver table whose current files take more than this
// many times the bytes of its live rows is compacted after the merge step
// that took it there. One step adds at most about one table's worth (the
// fold writes each key once, and a delete file costs a few bytes a row),
// so the table stays below CompactRatio+1 times its live bytes at every
// commit, under RatioBound with room for small files' overhead.
const CompactRatio = 1.25

// compactSmallTable: a table whose live rows take at most this is
// compacted whenever its file count passes its bound; a larger one only
// once the bytes its compaction would fold in (replaced rows, delete
// files) are at least 1/compactAmortize of its live bytes, so a big table
// touched lightly is not rewritten at every step.
const (
	compactSmallTable = 64 << 20
	compactAmortize   = 16
)

// CompactFiles is the data+delete file count past which a silver table of
// `partitions` partitions (buckets; 1 unpartitioned) is compacted after a
// merge step.
func CompactFiles(partitions int) int { return 4*max(partitions, 1) + 16 }

// FileBound is the most data+delete files a silver table of `partitions`
// partitions holds after any commit while its live rows take at most
// compactSmallTable: CompactFiles, plus what one step writes (a data and a
// delete file per partition).
func FileBound(partitions int) int { return CompactFiles(partitions) + 2*max(partitions, 1) }

// Footprint judgement of a table's current state.
type FootprintCheck struct {
	lake.Footprint
	Partitions int `json:"partitions"`
	// Ratio is Bytes / LiveBytes (0: empty table).
	Ratio float64 `json:"ratio"`
	// FileBound is FileBound(Partitions).
	FileBound int `json:"file_bound"`
	// Over says which bound the table passes ("" none): shown as a warning
	// by `tidemark status`.
	Over string `json:"over,omitempty"`
}

// CheckFootprint measures a silver table against its bounds: bytes at most
// RatioBound times its live bytes, files at most FileBound.
func CheckFootprint(ctx context.Context, t lake.Maintained) (FootprintCheck, error) {
	fp, err := t.Footprint(ctx)
	if err != nil {
		return FootprintCheck{}, err
	}
	c := FootprintCheck{Footprint: fp, Partitions: 1}
	if kt, ok := t.(lake.KeyedTable); ok {
		if b, ok := kt.Bucketer(); ok {
			c.Partitions = b.Buckets()
		}
	}
	c.FileBound = FileBound(c.Partitions)
	if live := fp.LiveBytes(); live > 0 {
		c.Ratio = float64(fp.Bytes()) / float64(live)
	}
	switch {
	case c.Ratio > RatioBound:
		c.Over = fmt.Sprintf("bytes %.1f× the live rows (bound %d×)", c.Ratio, RatioBound)
	case fp.Files() > c.FileBound && fp.LiveBytes() <= compactSmallTable:
		c.Over = fmt.Sprintf("%d data+delete files (bound %d)", fp.Files(), c.FileBound)
	}
	return c, nil
}

// needsCompaction says why a table should be compacted now ("" not).
func (c FootprintCheck) needsCompaction() string {
	live := c.LiveBytes()
	if live <= 0 {
		if c.DeleteFiles > 0 || c.DataFiles > 1 {
			return "no live rows"
		}
		return ""
	}
	if c.Ratio > CompactRatio {
		return fmt.Sprintf("bytes %.2f× the live rows", c.Ratio)
	}
	if c.Files() > CompactFiles(c.Partitions) {
		garbage := c.Bytes() - live
		if live <= compactSmallTable || garbage*compactAmortize >= live {
			return fmt.Sprintf("%d data+delete files", c.Files())
		}
	}
	return ""
}

// compactIfDue compacts the silver table after a merge step when its
// footprint passed its bounds. Compaction is deferrable: one that loses to
// another writer (a `tidemark merge` beside the pipeline) or fails changes
// nothing, is logged and left to the next step, and never fails the merge
// (which committed); only a cancelled ctx is returned.
func (j *job) compactIfDue(ctx context.Context) error {
	err := j.compact(ctx)
	if err == nil || ctx.Err() != nil {
		return ctx.Err()
	}
	j.m.log.Warn("silver compaction failed; the next merge step retries", "table", j.res.Table, "error", err.Error())
	return nil
}

func (j *job) compact(ctx context.Context) error {
	if j.m.opts.NoAutoCompact {
		return nil
	}
	mt, ok := j.s.(lake.Maintained)
	if !ok {
		return nil
	}
	// Rows still owed a column's default are found by the files without
	// the column: a rewrite would hide them (as `tidemark maintain` does).
	if len(FillPending(mt)) > 0 {
		return nil
	}
	c, err := CheckFootprint(ctx, mt)
	if err != nil {
		return err
	}
	why := c.needsCompaction()
	if why == "" {
		return nil
	}
	start := j.m.now()
	r, err := mt.Compact(ctx, lake.CompactOptions{TargetFileSize: j.m.opts.TargetFileSize})
	if errors.Is(err, lake.ErrCommitConflict) {
		j.m.log.Info("silver compaction gave way to a concurrent commit; the next merge retries", "table", j.res.Table, "error", err.Error())
		return nil
	}
	if err != nil {
		return fmt.Errorf("compact (%s): %w", why, err)
	}
	j.res.Compactions++
	j.m.log.Info("silver table compacted", "table", j.res.Table, "why", why,
		"data_files", fmt.Sprintf("%d->%d", c.DataFiles, c.DataFiles-r.RemovedDataFiles+r.AddedDataFiles),
		"delete_files", fmt.Sprintf("%d->%d", c.DeleteFiles, c.DeleteFiles-r.RemovedDeleteFiles),
		"bytes_before", r.BytesBefore, "bytes_after", r.BytesAfter, "took", j.m.now().Sub(start).Round(time.Millisecond).String())
	return nil
}

// BucketBytes is how many bytes of bronze data files at a table's build
// make one bucket of its silver table, with Options.AdaptBuckets.
const BucketBytes = 64 << 20

// AdaptedBuckets is the number of buckets a silver table built from
// bronzeBytes of bronze data files gets, with at most `most`: one per
// BucketBytes, 0 (unpartitioned) below two.
func AdaptedBuckets(bronzeBytes int64, most int) int {
	n := int((bronzeBytes + BucketBytes - 1) / BucketBytes)
	if n < 2 {
		return 0
	}
	return min(n, most)
}
