package bronze

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// checkpointProps are the namespace properties that record cp (doc.go,
// "Checkpoint"): its fields under fixed keys, each Info entry k under
// tidemark.<k>.
func checkpointProps(cp pipeline.Checkpoint, now time.Time) map[string]string {
	props := make(map[string]string, len(cp.Info)+4)
	for k, v := range cp.Info {
		props[infoPrefix+k] = v
	}
	props[PropCommitLSN] = strconv.FormatUint(cp.Pos, 10)
	props[PropResume] = cp.Resume
	props[PropUpdatedAt] = now.UTC().Format(time.RFC3339Nano)
	if !cp.Watermark.IsZero() {
		props[PropWatermark] = cp.Watermark.UTC().Format(time.RFC3339Nano)
	}
	return props
}

// infoPrefix prefixes an Info key in the namespace properties.
const infoPrefix = "tidemark."

// reservedInfo are the keys Info may not use: the checkpoint's own.
var reservedInfo = map[string]bool{
	strings.TrimPrefix(PropCommitLSN, infoPrefix): true,
	strings.TrimPrefix(PropResume, infoPrefix):    true,
	strings.TrimPrefix(PropWatermark, infoPrefix): true,
	strings.TrimPrefix(PropUpdatedAt, infoPrefix): true,
}

// checkInfo refuses Info keys that would overwrite the checkpoint's own
// properties or that are not lowercase words joined by '-'.
func checkInfo(info map[string]string) error {
	for k := range info {
		if reservedInfo[k] || !infoKeyOK(k) {
			return fmt.Errorf("checkpoint info key %q is reserved or malformed (lowercase letters, digits and '-')", k)
		}
	}
	return nil
}

func infoKeyOK(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// parseCheckpoint reads a checkpoint back from the namespace properties.
// A lake written before tidemark.resume existed holds a PostgreSQL
// checkpoint whose resume position is tidemark.acked-lsn: it is read as
// Resume, so such a lake resumes where it stopped. No resume token at all:
// no checkpoint. An unreadable position or watermark is corrupt state.
func parseCheckpoint(source string, props map[string]string) (pipeline.Checkpoint, bool, error) {
	var cp pipeline.Checkpoint
	resume, ok := props[PropResume]
	if !ok {
		if resume, ok = props[PropAckedLSN]; !ok {
			return cp, false, nil
		}
	}
	cp.Resume = resume
	bad := func(k string, err error) error {
		return fault.With(fault.ErrCorruptState, fmt.Sprintf("checkpoint of source %s: property %s is unreadable; refusing to guess a position", source, k), err)
	}
	var err error
	if v := props[PropCommitLSN]; v != "" {
		if cp.Pos, err = strconv.ParseUint(v, 10, 64); err != nil {
			return cp, false, bad(PropCommitLSN, err)
		}
	}
	if v := props[PropWatermark]; v != "" {
		if cp.Watermark, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return cp, false, bad(PropWatermark, err)
		}
	}
	cp.Info = map[string]string{}
	for k, v := range props {
		if key, ok := strings.CutPrefix(k, infoPrefix); ok && !reservedInfo[key] && infoKeyOK(key) {
			cp.Info[key] = v
		}
	}
	return cp, true, nil
}
