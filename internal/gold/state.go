package gold

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake/storage"
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

// statePath is where the State of gold table name of source is kept,
// relative to the warehouse (a local directory or an object store:
// package storage).
func statePath(source, name string) string {
	return stateDir(source) + "/" + name + ".json"
}

func stateDir(source string) string { return "_tidemark/gold/" + source }

// note records a refresh attempt of s that ended with err (nil: success).
// A failure to record is logged: status is the only reader.
func (r *Refresher) note(s Spec, err error) {
	if r.opts.Warehouse == "" {
		return
	}
	path := statePath(r.opts.Source, s.Name)
	prev, _ := readState(r.opts.Warehouse, path)
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
	if werr := storage.WriteFile(context.Background(), r.opts.Warehouse, path, js); werr != nil {
		r.log.Warn("cannot record the gold table's state for status", "table", st.Table, "error", werr.Error())
	}
}

// failing reports whether the last refresh of s recorded an error.
func (r *Refresher) failing(s Spec) bool {
	if r.opts.Warehouse == "" {
		return false
	}
	st, err := readState(r.opts.Warehouse, statePath(r.opts.Source, s.Name))
	return err == nil && st.Error != ""
}

func readState(warehouse, path string) (State, error) {
	var st State
	b, err := storage.ReadFile(context.Background(), warehouse, path)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// States returns the recorded states of source's gold tables, by name.
func States(warehouse, source string) map[string]State {
	out := map[string]State{}
	files, _ := storage.List(context.Background(), warehouse, stateDir(source))
	sort.Strings(files)
	for _, f := range files {
		if !strings.HasSuffix(f, ".json") {
			continue
		}
		if st, err := readState(warehouse, stateDir(source)+"/"+f); err == nil {
			out[strings.TrimSuffix(f, ".json")] = st
		}
	}
	return out
}
