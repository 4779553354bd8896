package gold

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/fault"
)

// State is what `tidemark status` shows of a gold table besides its
// commits: the last refresh attempt and the last error, kept in the
// warehouse (like silver's failing merges) so that a status run in another
// process sees them.
type State struct {
	Table       string    `json:"table"`
	SQLSHA256   string    `json:"sql_sha256"`
	LastAttempt time.Time `json:"last_attempt"`
	// Error is the last refresh's error ("": it succeeded), Code its name.
	Error    string    `json:"error,omitempty"`
	Code     string    `json:"code,omitempty"`
	Failures int       `json:"failures,omitempty"` // in a row
	Since    time.Time `json:"since,omitzero"`     // of the first of them
}

// statePath is where the State of gold table name of source is kept.
func statePath(warehouse, source, name string) string {
	return filepath.Join(warehouse, "_tidemark", "gold", source, name+".json")
}

// note records a refresh attempt of s that ended with err (nil: success).
// A failure to record is logged: status is the only reader.
func (r *Refresher) note(s Spec, err error) {
	if r.opts.Warehouse == "" {
		return
	}
	path := statePath(r.opts.Warehouse, r.opts.Source, s.Name)
	prev, _ := readState(path)
	st := State{Table: r.table(s), SQLSHA256: hashSQL(query(s)), LastAttempt: r.now().UTC()}
	if err != nil {
		st.Error = err.Error()
		var fe *fault.Error
		if errors.As(err, &fe) {
			st.Code = fe.Code
		}
		st.Failures, st.Since = 1, st.LastAttempt
		if prev.Error != "" {
			st.Failures, st.Since = prev.Failures+1, prev.Since
		}
	}
	js, _ := json.MarshalIndent(st, "", "  ")
	if werr := writeFileAtomic(path, js); werr != nil {
		r.log.Warn("cannot record the gold table's state for status", "table", st.Table, "error", werr.Error())
	}
}

// failing reports whether the last refresh of s recorded an error.
func (r *Refresher) failing(s Spec) bool {
	if r.opts.Warehouse == "" {
		return false
	}
	st, err := readState(statePath(r.opts.Warehouse, r.opts.Source, s.Name))
	return err == nil && st.Error != ""
}

func readState(path string) (State, error) {
	var st State
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// States returns the recorded states of source's gold tables, by name.
func States(warehouse, source string) map[string]State {
	out := map[string]State{}
	files, _ := filepath.Glob(filepath.Join(warehouse, "_tidemark", "gold", source, "*.json"))
	sort.Strings(files)
	for _, f := range files {
		if st, err := readState(f); err == nil {
			out[strings.TrimSuffix(filepath.Base(f), ".json")] = st
		}
	}
	return out
}
