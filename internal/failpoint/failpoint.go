// Package failpoint lets the fault suite crash, panic or pause tidemark at an
// exact point of its data path ("after the data file is written, before the
// commit"), which a kill -9 at a random moment only hits by luck.
//
// A failpoint is a named call in product code:
//
//	failpoint.Inject("bronze-before-commit")
//
// It does nothing unless the environment variable TIDEMARK_FAILPOINTS names
// it when the process starts:
//
//	TIDEMARK_FAILPOINTS='bronze-before-commit=exit;silver-after-commit=3*panic;stream-before-status=sleep(2000)'
//
// Actions:
//
//	exit       write "failpoint NAME: exit" to stderr and os.Exit(137), as a
//	           kill -9 at that point would (no deferred function runs, nothing
//	           is flushed)
//	panic      panic("failpoint NAME")
//	sleep(ms)  sleep that many milliseconds, then go on (to land a signal
//	           or a network fault inside a window)
//	error      make the point report an error (ErrInjected) instead of
//	           going on: only at points written as failpoint.Err(NAME),
//	           which say what the error stands for (e.g. "the commit
//	           landed but its answer was lost"); at an Inject point it
//	           does nothing but count the hit
//
// "N*action" fires on the Nth time the point is reached (counting from 1)
// and never again; without it the action fires every time.
// Entries are separated by ";" or ",". A malformed value panics at start:
// a fault test whose failpoint silently does nothing would pass vacuously.
//
// Tests in the same process can also run their own code at a point
// (OnHit), e.g. to commit as a second writer exactly between a writer's
// read and its commit.
//
// Disabled, Inject costs one atomic load. The configuration is read once,
// in the package's initialisation: the only state this package keeps, and
// the reason it exists only for tests.
package failpoint

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// EnvVar is the environment variable that enables failpoints.
const EnvVar = "TIDEMARK_FAILPOINTS"

// ExitCode is the exit status of the "exit" action: that of a process
// killed by SIGKILL as a shell reports it (128+9).
const ExitCode = 137

// Action is what a failpoint does when it fires.
type Action int

const (
	Exit Action = iota + 1
	Panic
	Sleep
	Error
	Call // a function given by OnHit
)

// ErrInjected is what Err returns when its failpoint fires with the
// "error" action.
var ErrInjected = errors.New("injected by failpoint")

type point struct {
	action Action
	sleep  time.Duration
	call   func()
	nth    int64        // fire only on this hit (1-based); 0: every hit
	hits   atomic.Int64 // times reached
}

// active is nil unless failpoints are configured.
var active atomic.Pointer[map[string]*point]

func init() {
	if spec := os.Getenv(EnvVar); spec != "" {
		if err := Enable(spec); err != nil {
			panic(err)
		}
	}
}

// Enable replaces the failpoint configuration with spec (the syntax of
// TIDEMARK_FAILPOINTS; "" disables every failpoint). For tests in the same
// process; the binary reads the environment.
func Enable(spec string) error {
	pts, err := parse(spec)
	if err != nil {
		return err
	}
	if len(pts) == 0 {
		active.Store(nil)
		return nil
	}
	active.Store(&pts)
	return nil
}

// parse parses a TIDEMARK_FAILPOINTS value.
func parse(spec string) (map[string]*point, error) {
	pts := map[string]*point{}
	for _, entry := range strings.FieldsFunc(spec, func(r rune) bool { return r == ';' || r == ',' }) {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, act, ok := strings.Cut(entry, "=")
		name, act = strings.TrimSpace(name), strings.TrimSpace(act)
		if !ok || name == "" || act == "" {
			return nil, fmt.Errorf("%s: %q is not name=action", EnvVar, entry)
		}
		p := &point{}
		if n, rest, ok := strings.Cut(act, "*"); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("%s: %s: %q is not a positive hit count", EnvVar, name, n)
			}
			p.nth, act = v, rest
		}
		switch {
		case act == "exit":
			p.action = Exit
		case act == "panic":
			p.action = Panic
		case act == "error":
			p.action = Error
		case strings.HasPrefix(act, "sleep(") && strings.HasSuffix(act, ")"):
			ms, err := strconv.ParseInt(act[len("sleep("):len(act)-1], 10, 64)
			if err != nil || ms < 0 {
				return nil, fmt.Errorf("%s: %s: %q is not sleep(milliseconds)", EnvVar, name, act)
			}
			p.action, p.sleep = Sleep, time.Duration(ms)*time.Millisecond
		default:
			return nil, fmt.Errorf("%s: %s: unknown action %q (exit, panic, sleep(ms), error)", EnvVar, name, act)
		}
		if _, dup := pts[name]; dup {
			return nil, fmt.Errorf("%s: failpoint %s given twice", EnvVar, name)
		}
		pts[name] = p
	}
	return pts, nil
}

// Inject runs the action configured for the failpoint name, if any. Safe
// for concurrent use.
func Inject(name string) {
	m := active.Load()
	if m == nil {
		return
	}
	_ = inject(*m, name)
}

// Err is Inject at a point that can fail: it runs the configured action,
// and returns an error wrapping ErrInjected when that action is "error"
// (nil otherwise). The caller treats it as the failure the point stands
// for.
func Err(name string) error {
	m := active.Load()
	if m == nil {
		return nil
	}
	return inject(*m, name)
}

// OnHit makes the failpoint name call fn each time it is reached, in the
// goroutine that reached it, in addition to the configured failpoints
// (replacing one of the same name). For tests in the same process; the
// returned function removes the hook. Not for concurrent use with Enable.
func OnHit(name string, fn func()) (remove func()) {
	pts := map[string]*point{}
	if m := active.Load(); m != nil {
		for k, v := range *m {
			pts[k] = v
		}
	}
	prev := pts[name]
	pts[name] = &point{action: Call, call: fn}
	active.Store(&pts)
	return func() {
		cur := map[string]*point{}
		if m := active.Load(); m != nil {
			for k, v := range *m {
				cur[k] = v
			}
		}
		if prev != nil {
			cur[name] = prev
		} else {
			delete(cur, name)
		}
		if len(cur) == 0 {
			active.Store(nil)
		} else {
			active.Store(&cur)
		}
	}
}

// Hits returns how many times the failpoint name was reached while
// failpoints were enabled (0 if it is not configured).
func Hits(name string) int64 {
	m := active.Load()
	if m == nil {
		return 0
	}
	if p, ok := (*m)[name]; ok {
		return p.hits.Load()
	}
	return 0
}

func inject(m map[string]*point, name string) error {
	p, ok := m[name]
	if !ok {
		return nil
	}
	n := p.hits.Add(1)
	if p.nth != 0 && n != p.nth {
		return nil
	}
	switch p.action {
	case Exit:
		fmt.Fprintf(os.Stderr, "failpoint %s: exit\n", name)
		os.Exit(ExitCode)
	case Panic:
		panic("failpoint " + name)
	case Sleep:
		time.Sleep(p.sleep)
	case Error:
		return fmt.Errorf("failpoint %s: %w", name, ErrInjected)
	case Call:
		p.call()
	}
	return nil
}
