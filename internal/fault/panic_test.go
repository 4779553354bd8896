package fault_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/fault"
)

func TestGuardTurnsAPanicIntoAnError(t *testing.T) {
	err := fault.Guard("capture stream", func() error { panic(errors.New("boom")) })()
	if !errors.Is(err, fault.ErrPanic) {
		t.Fatalf("err = %v, want ErrPanic", err)
	}
	if got := fault.ExitCode(err); got != fault.ExitInternal {
		t.Errorf("exit code %d, want %d", got, fault.ExitInternal)
	}
	if fault.ClassOf(err) == fault.Transient {
		t.Errorf("a panic must not be retried")
	}
	var pe *fault.PanicError
	if !errors.As(err, &pe) || pe.Where != "capture stream" || pe.Value != "boom" || len(pe.Stack) == 0 {
		t.Errorf("PanicError = %+v", pe)
	}
	if !strings.Contains(err.Error(), "panic in capture stream") {
		t.Errorf("message %q", err.Error())
	}
	if err := fault.Guard("x", func() error { return nil })(); err != nil {
		t.Errorf("no panic: err = %v", err)
	}
}

func TestMarkTransientKeepsAFatalClass(t *testing.T) {
	corrupt := fault.With(fault.ErrCorruptState, "metadata file m.json cannot be read", errors.New("unexpected end of JSON input"))
	err := fault.MarkTransient(corrupt)
	if fault.ClassOf(err) != fault.Fatal || !errors.Is(err, fault.ErrCorruptState) {
		t.Errorf("MarkTransient(corrupt_state): class %v", fault.ClassOf(err))
	}
	if fault.ClassOf(fault.MarkTransient(errors.New("commit failed"))) != fault.Transient {
		t.Errorf("an unclassified error is marked transient")
	}
}
