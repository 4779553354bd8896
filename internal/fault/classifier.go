package fault

import (
	"slices"
	"sync"
)

// Classifier recognises the errors of one source's client library (the
// PostgreSQL source registers pgconn's SQLSTATEs and connection errors).
// This package knows no client library: each source brings its rules, and
// the composition root (internal/app) registers them.
type Classifier struct {
	// Name identifies the source; registering a name again replaces it.
	Name string
	// Class returns err's class when err is one of the library's errors
	// (ok), e.g. Transient for a server shutting down. ok=false: not its
	// error, the next classifier (and then the network rules) decide.
	// Called on error paths only; must be safe for concurrent use.
	Class func(err error) (c Class, ok bool)
	// Check, if set, says what an operator should check about err, a
	// transient error of the library that persisted past the retry
	// budget; "" when it has nothing specific to say.
	Check func(err error) string
}

// classifiers are the registered source classifiers. Written at start by
// the composition root, read on error paths: the one piece of state the
// classification keeps, because the callers of ClassOf (retry loops,
// metrics) must not need to know which source an error came from.
var classifiers struct {
	sync.RWMutex
	list []Classifier
}

// RegisterClassifier adds (or, for a name already registered, replaces) a
// source's classifier. Idempotent; safe for concurrent use.
func RegisterClassifier(c Classifier) {
	classifiers.Lock()
	defer classifiers.Unlock()
	if i := slices.IndexFunc(classifiers.list, func(o Classifier) bool { return o.Name == c.Name }); i >= 0 {
		classifiers.list[i] = c
		return
	}
	classifiers.list = append(classifiers.list, c)
}

// classify asks the registered classifiers, in order of registration.
func classify(err error) (Class, bool) {
	classifiers.RLock()
	defer classifiers.RUnlock()
	for _, c := range classifiers.list {
		if c.Class == nil {
			continue
		}
		if class, ok := c.Class(err); ok {
			return class, true
		}
	}
	return Unknown, false
}

// checkSource asks the registered classifiers for advice on err.
func checkSource(err error) string {
	classifiers.RLock()
	defer classifiers.RUnlock()
	for _, c := range classifiers.list {
		if c.Check == nil {
			continue
		}
		if s := c.Check(err); s != "" {
			return s
		}
	}
	return ""
}
