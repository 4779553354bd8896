package silver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake/storage"
)

// DefaultMaxFailures is how many merges of one silver table in a row may
// fail the same way (the same message, an error not marked transient)
// before the failure becomes fault.ErrSilverMergeFailing, which stops
// Run: a merge that cannot succeed is never retried in a silent loop.
// Transient errors have their own budget (DefaultGiveUp).
const DefaultMaxFailures = 5

// failures counts, per silver table, the merges that failed in a row the
// same way.
type failures struct {
	mu sync.Mutex
	m  map[string]failure
}

type failure struct {
	msg   string
	n     int
	since time.Time
}

// Failing is a silver table's named merge failure as `tidemark status`
// shows it; it is kept in the warehouse until a merge of the table
// succeeds.
type Failing struct {
	Table    string    `json:"table"`
	Code     string    `json:"code"`
	Attempts int       `json:"attempts"`
	Since    time.Time `json:"since"`
	Cause    string    `json:"cause"`
	Fix      string    `json:"fix"`
}

// failingPath is where table's Failing is kept, relative to the
// warehouse (a local directory or an object store: package storage).
func failingPath(table string) string {
	return "_tidemark/silver/" + table + ".failing.json"
}

// noteFailure counts err, a failed merge of table, and returns err itself
// until the table has failed DefaultMaxFailures times in a row the same
// way; then the named error, which it also records for `tidemark status`.
func (m *Merger) noteFailure(table, schema, name string, err error) error {
	if fault.ClassOf(err) == fault.Transient || errors.Is(err, fault.ErrSilverMergeFailing) {
		return err
	}
	msg := err.Error()
	m.failed.mu.Lock()
	if m.failed.m == nil {
		m.failed.m = map[string]failure{}
	}
	f := m.failed.m[table]
	if f.msg != msg {
		f = failure{msg: msg, since: m.now()}
	}
	f.n++
	m.failed.m[table] = f
	m.failed.mu.Unlock()
	max := m.opts.MaxFailures
	if max <= 0 {
		max = DefaultMaxFailures
	}
	if f.n < max {
		return err
	}
	fl := Failing{Table: table, Code: fault.ErrSilverMergeFailing.Code, Attempts: f.n, Since: f.since.UTC(), Cause: msg,
		Fix: fmt.Sprintf("fix the cause named here (bronze keeps every change: nothing is lost), then start tidemark run again, "+
			"or retry this table alone with tidemark merge --warehouse DIR %s.%s; a cause inside tidemark is a bug to report with this message", schema, name)}
	if werr := writeFailing(m.cat.Warehouse(), fl); werr != nil {
		m.log.Warn("cannot record the silver merge failure for tidemark status", "table", table, "error", werr.Error())
	}
	// The cause (err) is printed after the message: "...; the last failure: <cause>".
	return fault.With(fault.ErrSilverMergeFailing, fmt.Sprintf("silver table %s: %d merges in a row failed the same way since %s; fix: %s; the last failure",
		table, f.n, fl.Since.Format(time.RFC3339), fl.Fix), err)
}

// noteSuccess forgets table's failures.
func (m *Merger) noteSuccess(table string) {
	m.failed.mu.Lock()
	delete(m.failed.m, table)
	m.failed.mu.Unlock()
	if err := storage.Remove(context.Background(), m.cat.Warehouse(), failingPath(table)); err != nil {
		m.log.Warn("cannot clear the recorded silver merge failure", "table", table, "error", err.Error())
	}
}

func writeFailing(warehouse string, f Failing) error {
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return storage.WriteFile(context.Background(), warehouse, failingPath(f.Table), data)
}

// readFailing returns table's recorded failure, if any.
func readFailing(warehouse, table string) (*Failing, error) {
	data, err := storage.ReadFile(context.Background(), warehouse, failingPath(table))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var f Failing
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("silver: %s/%s: %w", warehouse, failingPath(table), err)
	}
	return &f, nil
}

// String is the failure as status prints it.
func (f *Failing) String() string {
	return fmt.Sprintf("failing: [%s] %d merges in a row since %s: %s; fix: %s", f.Code, f.Attempts,
		f.Since.Format(time.RFC3339), strings.TrimSpace(f.Cause), f.Fix)
}
