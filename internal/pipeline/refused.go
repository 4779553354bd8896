package pipeline

import (
	"context"
	"errors"
	"log/slog"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
)

// RefusalRecorder is the Sink side of the tables a source leaves out on
// their own (no key it can merge by, a name the lake cannot hold):
// bronze.Writer keeps them beside the checkpoint, for `tidemark status`.
// Optional: a Sink without it (a test's) is told nothing.
type RefusalRecorder interface {
	// SetRefused replaces the recorded set of refused tables and why.
	SetRefused(ctx context.Context, refused map[change.TableID]string) error
}

// Reasons renders each table's error with its named error's code first:
// "[code] message".
func Reasons(errs map[change.TableID]error) map[change.TableID]string {
	out := make(map[change.TableID]string, len(errs))
	for id, err := range errs {
		out[id] = err.Error()
		var fe *fault.Error
		if errors.As(err, &fe) {
			out[id] = "[" + fe.Code + "] " + out[id]
		}
	}
	return out
}

// RecordRefused logs each table of refused (with why, Reasons) and
// records the whole set in sink, so a table fixed since is no longer
// named. show names a table in the log.
func RecordRefused(ctx context.Context, sink Sink, log *slog.Logger, refused map[change.TableID]error, show func(change.TableID) string) error {
	out := Reasons(refused)
	for id, why := range out {
		log.Warn("table not captured", "table", show(id), "reason", why)
	}
	if r, ok := sink.(RefusalRecorder); ok {
		return r.SetRefused(ctx, out)
	}
	return nil
}

// BronzeOnlyRecorder is the Sink side of the tables a source captures
// into bronze only, having no key to merge them by (bronze.Writer: for
// `tidemark status` and `tidemark verify`). Optional: a Sink without it
// (a test's) is told nothing.
type BronzeOnlyRecorder interface {
	// SetBronzeOnly replaces the recorded set of tables captured into
	// bronze only and why.
	SetBronzeOnly(ctx context.Context, keyless map[change.TableID]string) error
}

// RecordBronzeOnly logs each table of keyless (captured into bronze only,
// with why) and records the whole set in sink, so a table given a key
// since is no longer named. show names a table in the log.
func RecordBronzeOnly(ctx context.Context, sink Sink, log *slog.Logger, keyless map[change.TableID]error, show func(change.TableID) string) error {
	out := Reasons(keyless)
	for id, why := range out {
		log.Warn("table captured into bronze only, no silver", "table", show(id), "reason", why)
	}
	if r, ok := sink.(BronzeOnlyRecorder); ok {
		return r.SetBronzeOnly(ctx, out)
	}
	return nil
}
