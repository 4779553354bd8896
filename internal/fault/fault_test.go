package fault_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/tidemark/tidemark/internal/fault"
)

// A file system error is not a network blip: `mkdir …: permission denied`
// under a warehouse, or a missing config file, must not be retried for the
// retry budget and then reported as transient (exit 4). Network errnos and
// net errors still are transient.
func TestIsTransientFileSystemErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"mkdir EACCES", &os.PathError{Op: "mkdir", Path: "/root/lake", Err: syscall.EACCES}, false},
		{"open ENOENT", fmt.Errorf("config: %w", &os.PathError{Op: "open", Path: "/x.yaml", Err: syscall.ENOENT}), false},
		{"open EROFS", &os.PathError{Op: "open", Path: "/ro/catalog.db", Err: syscall.EROFS}, false},
		{"bare EACCES", syscall.EACCES, false},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"host unreachable", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, true},
		{"dial unix ENOENT", &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.ENOENT)}, true},
		{"bare ETIMEDOUT", syscall.ETIMEDOUT, true},
	} {
		if got := fault.IsTransient(tc.err); got != tc.want {
			t.Errorf("%s: IsTransient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
	if code := fault.ExitCode(&os.PathError{Op: "mkdir", Path: "/root/lake", Err: syscall.EACCES}); code == fault.ExitTransient {
		t.Errorf("mkdir EACCES exits %d (transient)", code)
	}
	if code := fault.ExitCode(fault.With(fault.ErrWarehouseAccess, "x", errors.New("y"))); code != fault.ExitConfig {
		t.Errorf("warehouse_access exits %d, want %d", code, fault.ExitConfig)
	}
	if code := fault.ExitCode(fault.With(fault.ErrServerConfig, "x", nil)); code != fault.ExitConfig {
		t.Errorf("server_config exits %d, want %d", code, fault.ExitConfig)
	}
}

// A source's classifier decides for its library's errors, before the
// network rules: a server error it calls permanent stays permanent even
// when its chain also holds an EOF; other errors fall through.
func TestRegisteredClassifier(t *testing.T) {
	errShutdown := errors.New("lib: server shutting down")
	errSyntax := errors.New("lib: syntax error")
	fault.RegisterClassifier(fault.Classifier{Name: "classtest", Class: func(err error) (fault.Class, bool) {
		switch {
		case errors.Is(err, errShutdown):
			return fault.Transient, true
		case errors.Is(err, errSyntax):
			return fault.Unknown, true
		}
		return fault.Unknown, false
	}})
	for _, tc := range []struct {
		err  error
		want fault.Class
	}{
		{fmt.Errorf("query: %w", errShutdown), fault.Transient},
		{errors.Join(errSyntax, io.EOF), fault.Unknown},
		{fmt.Errorf("read: %w", io.EOF), fault.Transient},
		{fault.With(fault.ErrSlotLost, "x", errShutdown), fault.Fatal},
	} {
		if got := fault.ClassOf(tc.err); got != tc.want {
			t.Errorf("ClassOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
