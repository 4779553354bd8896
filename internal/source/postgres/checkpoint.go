package postgres

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// Info keys of a PostgreSQL checkpoint (bronze stores them as the
// namespace properties tidemark.<key>, which predate pipeline.Checkpoint).
const (
	InfoAckedLSN = "acked-lsn" // end LSN confirmed to PostgreSQL: the same as Resume
	InfoWALEnd   = "wal-end"   // the server's WAL end when the flush started (for lag)
	InfoSlot     = "slot"      // the replication slot
)

// NewCheckpoint is the checkpoint of a transaction that ends at end and
// commits at commit (time t): Resume is end in decimal (the position
// confirmed to PostgreSQL and streamed from on restart).
func NewCheckpoint(end, commit uint64, t time.Time, walEnd uint64, slot string) pipeline.Checkpoint {
	cp := pipeline.Checkpoint{Pos: commit, Watermark: t}
	stamp(&cp, end, walEnd, slot)
	return cp
}

// stamp sets cp's Resume token and Info for end LSN end.
func stamp(cp *pipeline.Checkpoint, end, walEnd uint64, slot string) {
	e := strconv.FormatUint(end, 10)
	cp.Resume = e
	cp.Info = map[string]string{pipeline.InfoSource: "postgres", InfoAckedLSN: e, InfoWALEnd: strconv.FormatUint(walEnd, 10), InfoSlot: slot}
}

// ResumeLSN returns the end LSN a PostgreSQL checkpoint resumes from (and
// confirmed to the slot). An unreadable token is corrupt lake state: a
// position is never guessed.
func ResumeLSN(cp pipeline.Checkpoint) (uint64, error) {
	lsn, err := strconv.ParseUint(cp.Resume, 10, 64)
	if err != nil {
		return 0, fault.With(fault.ErrCorruptState, fmt.Sprintf(
			"checkpoint resume position %q is not an LSN (namespace property tidemark.resume, or tidemark.acked-lsn in a lake written before it); refusing to guess a position", cp.Resume), err)
	}
	return lsn, nil
}

// AckedLSN is ResumeLSN, 0 when the token is unreadable (status, logs).
func AckedLSN(cp pipeline.Checkpoint) uint64 {
	lsn, _ := ResumeLSN(cp)
	return lsn
}

// WALEnd returns the server's WAL end recorded with cp (0 if none).
func WALEnd(cp pipeline.Checkpoint) uint64 {
	n, _ := strconv.ParseUint(cp.Info[InfoWALEnd], 10, 64)
	return n
}
