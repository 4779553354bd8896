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

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/internal/fault"
)

func TestCheckNamesWhatToCheck(t *testing.T) {
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
		{&pgconn.PgError{Code: "53300"}, "no free connection slots"},
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
