package delta

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
)

// logDir is the log's directory under the table's.
const logDir = "_delta_log"

var (
	commitRE     = regexp.MustCompile(`^(\d{20})\.json$`)
	checkpointRE = regexp.MustCompile(`^(\d{20})\.checkpoint\.parquet$`)
)

func commitName(v int64) string     { return fmt.Sprintf("%020d.json", v) }
func checkpointName(v int64) string { return fmt.Sprintf("%020d.checkpoint.parquet", v) }

// state is a table's snapshot at one version: the reconciliation of every
// action up to it (PROTOCOL.md, "Action Reconciliation").
type state struct {
	version  int64 // -1: no commit yet
	protocol *Protocol
	meta     *Metadata
	// files are the active add actions by fileKey (path and deletion
	// vector: the protocol's logical file), order the keys in the order
	// they were added (the order Scan reads them).
	files map[string]*Add
	order []string
	// tombstones are the remove actions not followed by an add of the same
	// path, kept for checkpoints (vacuum's input).
	tombstones map[string]*Remove
	txns       map[string]Txn
}

func newState() *state {
	return &state{version: -1, files: map[string]*Add{}, tombstones: map[string]*Remove{}, txns: map[string]Txn{}}
}

// apply folds the actions of version v into the state.
func (s *state) apply(v int64, acts []action) {
	for _, a := range acts {
		switch {
		case a.Protocol != nil:
			s.protocol = a.Protocol
		case a.MetaData != nil:
			s.meta = a.MetaData
		case a.Txn != nil:
			s.txns[a.Txn.AppID] = *a.Txn
		case a.Add != nil:
			k := fileKey(a.Add.Path, a.Add.DeletionVector)
			if _, ok := s.files[k]; !ok {
				s.order = append(s.order, k)
			}
			s.files[k] = a.Add
			delete(s.tombstones, k)
		case a.Remove != nil:
			k := fileKey(a.Remove.Path, a.Remove.DeletionVector)
			if _, ok := s.files[k]; ok {
				delete(s.files, k)
				s.order = slices.DeleteFunc(s.order, func(o string) bool { return o == k })
			}
			s.tombstones[k] = a.Remove
		}
	}
	s.version = v
}

// listing is what the log directory holds.
type listing struct {
	commits     []int64 // sorted
	checkpoints []int64 // sorted; classic single-file checkpoints only
}

func listLog(dir string) (listing, error) {
	var l listing
	ents, err := os.ReadDir(filepath.Join(dir, logDir))
	if err != nil {
		return l, err
	}
	for _, e := range ents {
		if m := commitRE.FindStringSubmatch(e.Name()); m != nil {
			v, _ := strconv.ParseInt(m[1], 10, 64)
			l.commits = append(l.commits, v)
		} else if m := checkpointRE.FindStringSubmatch(e.Name()); m != nil {
			v, _ := strconv.ParseInt(m[1], 10, 64)
			l.checkpoints = append(l.checkpoints, v)
		}
	}
	slices.Sort(l.commits)
	slices.Sort(l.checkpoints)
	return l, nil
}

// readCommit reads and parses the commit file of version v.
func readCommit(dir string, v int64) ([]action, error) {
	data, err := os.ReadFile(filepath.Join(dir, logDir, commitName(v)))
	if err != nil {
		return nil, err
	}
	acts, err := parseCommit(data)
	if err != nil {
		return nil, fmt.Errorf("commit %d: %w", v, err)
	}
	return acts, nil
}

// loadState reads the table's latest snapshot: the newest checkpoint the
// log holds (if any) and the commits after it, which must be contiguous.
// Multi-part and V2 (UUID-named) checkpoints are not read: the commits
// are replayed instead, and a log whose commits before such a checkpoint
// are gone is refused.
func loadState(ctx context.Context, dir string) (*state, error) {
	return loadStateAt(ctx, dir, -1)
}

// loadStateAt is loadState of version upTo (-1: the latest).
func loadStateAt(ctx context.Context, dir string, upTo int64) (*state, error) {
	l, err := listLog(dir)
	if err != nil {
		return nil, err
	}
	if len(l.commits) == 0 {
		return nil, os.ErrNotExist
	}
	latest := l.commits[len(l.commits)-1]
	if upTo >= 0 {
		if upTo > latest {
			return nil, fmt.Errorf("version %d is not in the log (latest %d)", upTo, latest)
		}
		latest = upTo
	}
	st := newState()
	from := int64(0)
	for i := len(l.checkpoints) - 1; i >= 0; i-- {
		cv := l.checkpoints[i]
		if cv > latest {
			continue
		}
		cst, err := readCheckpoint(ctx, dir, cv)
		if err != nil {
			// A checkpoint being written (or torn by a crash: the rename
			// makes that unlikely) is skipped for an older one.
			continue
		}
		st, from = cst, cv+1
		break
	}
	have := map[int64]bool{}
	for _, v := range l.commits {
		have[v] = true
	}
	for v := from; v <= latest; v++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !have[v] {
			return nil, fmt.Errorf("the log lacks commit %d (of 0..%d) and holds no checkpoint after it", v, latest)
		}
		acts, err := readCommit(dir, v)
		if err != nil {
			return nil, err
		}
		st.apply(v, acts)
	}
	if st.protocol == nil || st.meta == nil {
		return nil, fmt.Errorf("the log up to version %d has no protocol or metaData action", latest)
	}
	return st, nil
}

// commitInfo returns the commitInfo action of commit v (nil if it has
// none); the error wraps os.ErrNotExist when the commit file is gone.
func commitInfo(dir string, v int64) (map[string]any, error) {
	acts, err := readCommit(dir, v)
	if err != nil {
		return nil, err
	}
	for _, a := range acts {
		if a.CommitInfo != nil {
			return a.CommitInfo, nil
		}
	}
	return nil, nil
}

// userProps decodes tidemark's properties from a commitInfo's
// userMetadata (a JSON object of strings).
func userProps(ci map[string]any) map[string]string {
	s, _ := ci["userMetadata"].(string)
	if s == "" {
		return nil
	}
	var props map[string]string
	if json.Unmarshal([]byte(s), &props) != nil {
		return nil
	}
	return props
}

// fileKey identifies a logical file: its path and its deletion vector's
// uniqueId (PROTOCOL.md, "Action Reconciliation", "Derived Fields").
func fileKey(path string, dv json.RawMessage) string {
	d, err := parseDV(dv)
	if err != nil || d == nil {
		return path
	}
	id := d.StorageType + d.PathOrInlineDv
	if d.Offset != nil {
		id += "@" + strconv.Itoa(int(*d.Offset))
	}
	return path + "\x00" + id
}
