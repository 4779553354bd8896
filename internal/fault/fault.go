// Package fault classifies tidemark's errors so that the process can decide
// what to do with them and how to exit.
//
// Three classes exist (ARCHITECTURE §1, rule 1: failure is loud):
//
//   - Config: the operator gave us something we cannot use (a bad flag, a
//     URL that does not parse, a table without a key). Nothing was moved.
//   - Fatal: continuing could lose or corrupt data (the slot is gone, WAL was
//     removed, the slot moved behind our back, an incompatible schema change).
//     tidemark stops and tells the operator what to do; it never "restarts
//     from latest" on its own.
//   - Transient: the network, a restarting server, a terminated walsender.
//     Retried with backoff; once retries are exhausted the process exits
//     with its own code so a supervisor can tell the difference.
//
// The class is carried by a marked type, never by matching message text.
package fault

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
)

// Class is the kind of failure.
type Class int

const (
	// Unknown is an error nobody classified; treated as fatal for exit codes.
	Unknown Class = iota
	Config
	Fatal
	Transient
)

func (c Class) String() string {
	switch c {
	case Config:
		return "configuration"
	case Fatal:
		return "fatal"
	case Transient:
		return "transient"
	}
	return "unknown"
}

// Exit codes of the tidemark binary (documented in docs/operations.md).
const (
	ExitOK        = 0
	ExitInternal  = 1 // an unclassified error (a bug): report it
	ExitConfig    = 2 // configuration or usage error: fix the input and rerun
	ExitFatal     = 3 // data-safety stop: read the message, run the recovery it names
	ExitTransient = 4 // transient errors persisted past the retry budget: fix the environment and rerun
	ExitDiffers   = 5 // tidemark verify: at least one table differs from its source
	ExitUnproven  = 6 // tidemark verify: nothing differs, but not every table could be checked
)

// ExitError carries an exit code that is not an error class: the outcome of
// a check (tidemark verify) rather than a failure to run it.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Error is a classified error. Code is a stable, greppable name.
type Error struct {
	Class Class
	Code  string
	Msg   string
	Err   error
}

func (e *Error) Error() string {
	s := e.Msg
	if e.Err != nil {
		if s != "" {
			s += ": "
		}
		s += e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches sentinels by Code, so a wrapped, annotated copy of a sentinel
// still satisfies errors.Is(err, ErrSlotLost).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code != "" && t.Code == e.Code
}

// Sentinels for the unrecoverable cases. Wrap them with With to add context.
var (
	ErrSlotLost           = &Error{Class: Fatal, Code: "slot_lost"}
	ErrWALLost            = &Error{Class: Fatal, Code: "wal_lost"}
	ErrSlotMoved          = &Error{Class: Fatal, Code: "slot_moved"}
	ErrPublicationMissing = &Error{Class: Fatal, Code: "publication_missing"}
	ErrNoPrimaryKey       = &Error{Class: Config, Code: "no_primary_key"}
	ErrPermissionDenied   = &Error{Class: Fatal, Code: "permission_denied"}
	ErrIncompatibleSchema = &Error{Class: Fatal, Code: "incompatible_schema"}
	ErrCorruptState       = &Error{Class: Fatal, Code: "corrupt_state"}
	ErrColumnCollision    = &Error{Class: Config, Code: "column_collision"}
	ErrUnsupportedName    = &Error{Class: Config, Code: "unsupported_name"}
	ErrBadConfig          = &Error{Class: Config, Code: "bad_config"}
	ErrAlreadyRunning     = &Error{Class: Config, Code: "already_running"}
	// ErrServerConfig: a PostgreSQL server setting tidemark needs is not
	// what it must be (wal_level, max_replication_slots, max_wal_senders).
	// A configuration error: the operator changes the setting (most need a
	// server restart); retrying cannot fix it.
	ErrServerConfig = &Error{Class: Config, Code: "server_config"}
	// ErrWarehouseAccess: the warehouse directory or its catalog cannot be
	// created, written (tidemark run) or read (tidemark status) by the user
	// running tidemark. A configuration error: retrying cannot fix it.
	ErrWarehouseAccess = &Error{Class: Config, Code: "warehouse_access"}
	// ErrObjectStore: an s3:// warehouse cannot be used as configured (no
	// such bucket, credentials missing or refused, access denied, endpoint
	// unreachable). A configuration error: the message names what to fix,
	// never the credentials.
	ErrObjectStore = &Error{Class: Config, Code: "object_store"}
	// ErrCatalogUnreachable: the Iceberg REST catalog did not answer, or
	// refused tidemark's credentials, when tidemark opened it. A
	// configuration error: the message names the URL (without credentials)
	// and what to check.
	ErrCatalogUnreachable = &Error{Class: Config, Code: "catalog_unreachable"}
	// ErrCommitConflict: another writer committed to a lake table between
	// tidemark's read of it and its commit, and bounded retries did not get
	// a commit through. Transient: nothing was applied or acknowledged, and
	// the work is recomputed from the table's new state; a second writer
	// that keeps racing exhausts the retry budget (exit 4) with this code.
	ErrCommitConflict = &Error{Class: Transient, Code: "commit_conflict", Msg: "commit conflict: the table changed since it was read"}
)

// With returns a copy of sentinel s carrying msg (what happened, for whom,
// and what to do) and an optional cause.
func With(s *Error, msg string, cause error) *Error {
	return &Error{Class: s.Class, Code: s.Code, Msg: msg, Err: cause}
}

// MarkTransient marks err as retryable. An error that already carries a
// class is returned as is: a corrupt file under a failed commit stays fatal,
// and a named transient error (ErrCommitConflict) keeps its code.
func MarkTransient(err error) error {
	if err == nil {
		return nil
	}
	var fe *Error
	if errors.As(err, &fe) {
		return err
	}
	return &Error{Class: Transient, Code: "transient", Err: err}
}

// ClassOf returns the class of err: the first classified error in its chain,
// else what a registered source classifier says (classifier.go), else a
// best guess for well-known network conditions.
func ClassOf(err error) Class {
	if err == nil {
		return Unknown
	}
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Class
	}
	if IsTransient(err) {
		return Transient
	}
	return Unknown
}

// NeedsOperator reports whether err, or any of the errors it joins
// (errors.Join), is fatal or a configuration error: retrying cannot fix
// it, so a loop that retries everything else stops on it.
func NeedsOperator(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if NeedsOperator(e) {
				return true
			}
		}
		return false
	}
	c := ClassOf(err)
	return c == Fatal || c == Config
}

// IsTransient reports whether err looks like a connection-level problem that
// a reconnect can fix: what a registered source classifier says of its
// client library's errors (a server shutting down or restarting, a
// terminated backend), else network errors, EOF, a deadline.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	if c, ok := classify(err); ok {
		return c == Transient
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		// A bare errno (under an *os.PathError from mkdir or open) also
		// satisfies net.Error: only the network ones are transient. A
		// warehouse that may not be written is a configuration problem,
		// and retrying it for the retry budget would only hide it.
		if errno, ok := ne.(syscall.Errno); !ok || networkErrno(errno) {
			return true
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	return false
}

// networkErrno reports whether errno is a network condition a reconnect
// can outlive.
func networkErrno(errno syscall.Errno) bool {
	switch errno {
	case syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ECONNABORTED, syscall.EPIPE, syscall.ETIMEDOUT,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN, syscall.ENETRESET, syscall.EHOSTDOWN:
		return true
	}
	return false
}

// ExitCode maps an error to the process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	switch ClassOf(err) {
	case Config:
		return ExitConfig
	case Fatal:
		return ExitFatal
	case Transient:
		return ExitTransient
	}
	return ExitInternal
}
