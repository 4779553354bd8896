package fault

import (
	"fmt"
	"runtime/debug"
)

// ErrPanic is the code of a panic recovered at one of tidemark's goroutine
// boundaries: a bug, reported with exit code 1 (ExitInternal), never retried.
var ErrPanic = &Error{Class: Unknown, Code: "panic"}

// PanicError is the error a recovered panic becomes. Its message holds the
// panic value as text (callers redact secrets from it like from any other
// error); Stack holds the goroutine's stack for a bug report, which Go
// prints with argument words in hex, never the values they point to.
type PanicError struct {
	Where string
	Value string
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("panic in %s (a bug in tidemark; nothing was acknowledged past the lake: report it with the log): %s", e.Where, e.Value)
}

// Guard returns fn wrapped so that a panic inside it is returned as an
// error (code "panic", exit 1) instead of crashing the process with the
// runtime's unredacted print of the panic value. For errgroup.Go and other
// goroutine entry points.
func Guard(where string, fn func() error) func() error {
	return func() (err error) {
		defer Recover(where, &err)
		return fn()
	}
}

// Recover, deferred, turns a panic of the calling goroutine into *errp.
func Recover(where string, errp *error) {
	r := recover()
	if r == nil {
		return
	}
	*errp = With(ErrPanic, "", &PanicError{Where: where, Value: fmt.Sprint(r), Stack: debug.Stack()})
}
