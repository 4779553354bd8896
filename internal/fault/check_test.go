package fault_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/fault"
)

// errLibBusy is an error of a source client library this test registers
// a classifier for.
var errLibBusy = errors.New("lib: server busy")

func TestCheckNamesWhatToCheck(t *testing.T) {
	fault.RegisterClassifier(fault.Classifier{Name: "checktest", Check: func(err error) string {
		if errors.Is(err, errLibBusy) {
			return "the library's own advice"
		}
		return ""
	}})
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1},
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("connect to source: %w", refused), "nothing accepts connections at 127.0.0.1:1"},
		{&net.DNSError{Name: "db.invalid", Err: "no such host", IsNotFound: true}, `the host name "db.invalid" does not resolve`},
		{fmt.Errorf("write: %w", syscall.ENOSPC), "is full"},
		{fault.With(fault.ErrCommitConflict, "table t", nil), "another writer"},
		{errLibBusy, "the library's own advice"},
		{errors.New("something else"), `"transient error, retrying" warnings above`},
	}
	for _, c := range cases {
		if got := fault.Check(c.err); !strings.Contains(got, c.want) {
			t.Errorf("Check(%v) = %q, want it to contain %q", c.err, got, c.want)
		}
	}
	gave := &fault.GaveUpError{After: time.Second, Err: fmt.Errorf("last: %w", refused)}
	if last := fault.LastError(fmt.Errorf("run: %w", gave)); !errors.Is(last, syscall.ECONNREFUSED) || strings.Contains(last.Error(), "giving up") {
		t.Errorf("LastError = %v", last)
	}
	if got := fault.OneLine("a:\n\tb\n\tb\n"); got != "a: b" {
		t.Errorf("OneLine = %q", got)
	}
}
