package verify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
)

// Exit codes of `tidemark verify` beyond fault's (0 equal, 2 usage, ...).
// They belong in internal/fault next to the others; they are here until
// then.
const (
	// ExitDifferences: at least one table differs from its source.
	ExitDifferences = fault.ExitDiffers
	// ExitIncomplete: no difference was found, but not every table could be
	// verified (not published yet, silver behind the source, keys that kept
	// changing, an error).
	ExitIncomplete = fault.ExitUnproven
)

// Defaults of Options.
const (
	DefaultWait          = 2 * time.Minute
	DefaultRounds        = 5
	DefaultChunkRows     = 256
	DefaultDrillRows     = 500_000
	DefaultMaxCandidates = 20_000
	DefaultMaxReport     = 20
)

// Options tune a verification.
type Options struct {
	// Source is the pipeline's name (bronze.<Source>, silver.<Source>).
	Source string
	// Tables limits the verification to these source tables; empty: every
	// table that has a silver or bronze table.
	Tables []TableName
	// MergeKeys are the declared merge keys (config merge_keys): a table
	// with one is compared by it instead of its primary key.
	MergeKeys map[TableName][]string
	// Wait bounds how long verify waits for a silver table to reach a
	// source position. 0: DefaultWait.
	Wait time.Duration
	// Rounds is how many times differing keys are read again, each time
	// after silver has passed a newer source position. 0: DefaultRounds.
	Rounds int
	// ChunkRows is the target number of rows per chunk. 0: DefaultChunkRows.
	ChunkRows int
	// DrillRows bounds the rows held in memory while drilling into chunks
	// whose hashes differ (one source query and one silver scan per batch).
	// 0: DefaultDrillRows.
	DrillRows int
	// MaxCandidates bounds the differing keys followed per table; beyond it
	// verify stops looking (the table is reported as different, or as
	// incomplete if none of those keys turned out to differ). 0:
	// DefaultMaxCandidates.
	MaxCandidates int
	// MaxReport is how many differing keys a table report lists. 0:
	// DefaultMaxReport; negative: all found.
	MaxReport int
	// NoPushdown hashes chunks in Go from the source's rows instead of in
	// SQL at the source (slower; for a source whose server encoding is not
	// UTF8 this is chosen automatically).
	NoPushdown bool
	// Poll is how often a wait looks at silver again. 0: 250ms.
	Poll time.Duration
}

func (o Options) withDefaults() Options {
	if o.Wait <= 0 {
		o.Wait = DefaultWait
	}
	if o.Rounds <= 0 {
		o.Rounds = DefaultRounds
	}
	if o.ChunkRows <= 0 {
		o.ChunkRows = DefaultChunkRows
	}
	if o.DrillRows <= 0 {
		o.DrillRows = DefaultDrillRows
	}
	if o.MaxCandidates <= 0 {
		o.MaxCandidates = DefaultMaxCandidates
	}
	if o.MaxReport == 0 {
		o.MaxReport = DefaultMaxReport
	}
	if o.Poll <= 0 {
		o.Poll = 250 * time.Millisecond
	}
	return o
}

// Table statuses.
const (
	StatusEqual           = "equal"
	StatusDifferent       = "different"
	StatusNotPublished    = "not_published"
	StatusBehind          = "behind"
	StatusMissingAtSource = "missing_at_source"
	StatusUnsettled       = "unsettled"
	StatusIncomplete      = "incomplete"
	StatusError           = "error"
)

// Report is the outcome of a verification.
type Report struct {
	Source string        `json:"source"`
	Tables []TableReport `json:"tables"`
	// NotCaptured are the published tables the capture leaves out (no key
	// to merge by, a name the lake cannot hold), with why: they have no
	// lake table to compare, and do not change the exit code.
	NotCaptured []NotCaptured `json:"not_captured,omitempty"`
	// BronzeOnly are the tables captured with no key to merge by: bronze
	// only, so no silver table to compare, with why; they do not change
	// the exit code either.
	BronzeOnly []NotCaptured `json:"bronze_only,omitempty"`
}

// NotCaptured is a published table the capture leaves out.
type NotCaptured struct {
	Table  string `json:"table"`
	Reason string `json:"reason"`
}

// ExitCode is the process exit code the report calls for: 0 if every table
// is equal, ExitDifferences if any differs, else ExitIncomplete.
func (r *Report) ExitCode() int {
	code := 0
	for _, t := range r.Tables {
		switch t.Status {
		case StatusEqual:
		case StatusDifferent, StatusMissingAtSource:
			return ExitDifferences
		default:
			code = ExitIncomplete
		}
	}
	return code
}

// TableReport is one table's outcome.
type TableReport struct {
	Table  string `json:"table"`  // silver.<source>.<schema>.<table>
	Source string `json:"source"` // <schema>.<table>
	Status string `json:"status"`
	// Reason explains a status other than equal and different.
	Reason string `json:"reason,omitempty"`
	// Position is the source position the first pass compared at, as the
	// source writes it (PostgreSQL X/Y, MySQL 000007:1234).
	Position string `json:"position,omitempty"`
	// SourceRows and SilverRows are the live rows counted by the first pass.
	SourceRows int64 `json:"source_rows"`
	SilverRows int64 `json:"silver_rows"`
	// Chunks is the number of chunks; ChunksDiffering those whose hashes
	// differed in the first pass (differences, or rows changed meanwhile).
	Chunks          int `json:"chunks"`
	ChunksDiffering int `json:"chunks_differing"`
	// Rechecked is the number of keys read again; Rounds the recheck rounds.
	Rechecked int `json:"rechecked_keys"`
	Rounds    int `json:"rounds"`
	// Pushdown: chunk hashes were computed at the source in SQL.
	Pushdown bool `json:"pushdown"`
	// Differences found (at most MaxReport of them; DifferencesTotal counts
	// all, and AtLeast says verify stopped looking).
	Differences      []Difference `json:"differences,omitempty"`
	DifferencesTotal int          `json:"differences_total"`
	AtLeast          bool         `json:"at_least,omitempty"`
	// Unsettled lists keys that changed during every check.
	Unsettled []string `json:"unsettled,omitempty"`
	Seconds   float64  `json:"seconds"`
}

// Difference kinds.
const (
	KindValues    = "values_differ"
	KindMissing   = "missing_in_silver"
	KindExtra     = "extra_in_silver"
	KindDuplicate = "duplicate_in_silver"
)

// Difference is one key whose row differs.
type Difference struct {
	Key     string       `json:"key"` // col=value, ...
	Kind    string       `json:"kind"`
	Columns []ColumnDiff `json:"columns,omitempty"`
	// SilverLSN is the cdc_source_lsn of silver's row (as Position), if it
	// has one.
	SilverLSN string `json:"silver_lsn,omitempty"`
}

// ColumnDiff is one column of a differing row, rendered for reading
// (truncated).
type ColumnDiff struct {
	Column string `json:"column"`
	Source string `json:"source"`
	Silver string `json:"silver"`
}

// Run verifies the silver tables of opts.Source against src (which it
// closes). Differences, tables that cannot be verified and per-table
// errors are in the report; an error is returned only when nothing could
// be verified (the source or the lake unreachable).
func Run(ctx context.Context, cat lake.Catalog, src Source, opts Options, log *slog.Logger) (*Report, error) {
	defer src.Close()
	opts = opts.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Source == "" {
		return nil, errors.New("verify: no source name")
	}
	tables := opts.Tables
	if len(tables) == 0 {
		var err error
		if tables, err = listTables(ctx, cat, opts.Source); err != nil {
			return nil, fmt.Errorf("verify: list the tables of source %s: %w", opts.Source, err)
		}
	}
	// The source must be reachable at all: a first snapshot says so.
	first, err := src.Snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	first.Close()
	v := &verifier{cat: cat, src: src, opts: opts, log: log, pushdown: !opts.NoPushdown}
	rep := &Report{Source: opts.Source}
	if len(opts.Tables) == 0 {
		refused, err := bronze.Refused(ctx, cat, opts.Source)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		for _, r := range refused {
			rep.NotCaptured = append(rep.NotCaptured, NotCaptured{Table: showName(r.Schema, r.Table), Reason: r.Reason})
		}
	}
	keyless, err := bronze.BronzeOnly(ctx, cat, opts.Source)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	for _, t := range tables {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if b, err := cat.Open(ctx, bronzeIdent(opts.Source, t)); err == nil && bronze.Keyless(b.Summary(), b.Properties()) {
			why := "[no_primary_key] the source table has no key to merge by"
			for _, k := range keyless {
				if k.Schema == t.Schema && k.Table == t.Table {
					why = k.Reason
				}
			}
			rep.BronzeOnly = append(rep.BronzeOnly, NotCaptured{Table: showName(t.Schema, t.Table), Reason: why})
			log.Info("not verified: bronze only, no silver table", "table", showName(t.Schema, t.Table))
			continue
		}
		tr := v.table(ctx, t)
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		log.Info("verified", "table", tr.Table, "status", tr.Status, "differences", tr.DifferencesTotal, "seconds", tr.Seconds)
		rep.Tables = append(rep.Tables, tr)
	}
	return rep, nil
}

// verifier is one run's shared state.
type verifier struct {
	cat      lake.Catalog
	src      Source
	opts     Options
	log      *slog.Logger
	pushdown bool
	// captureDown is set once a wait found the capture itself not moving;
	// later tables then do not wait again.
	captureDown bool
	nudged      bool
}

// showName is schema.table for a report line, Go-quoted when it holds a
// control character (a newline would split the line).
func showName(schema, table string) string {
	if strings.IndexFunc(schema+table, unicode.IsControl) >= 0 {
		return fmt.Sprintf("%q.%q", schema, table)
	}
	return quoteIdent(schema) + "." + quoteIdent(table)
}

// quoteIdent quotes s as a SQL identifier for a report line, as
// pgx.Identifier.Sanitize does (NUL bytes dropped, quotes doubled).
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, "\x00", ""), `"`, `""`) + `"`
}
