package fault_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/tidemark/tidemark/internal/fault"
)

func TestNeedsOperator(t *testing.T) {
	transient := fault.MarkTransient(errors.New("conflict"))
	fatal := fault.With(fault.ErrIncompatibleSchema, "table x", nil)
	cases := []struct {
		err  error
		want bool
	}{
		{transient, false},
		{errors.New("io"), false},
		{fatal, true},
		{fmt.Errorf("merge: %w", fatal), true},
		{errors.Join(fmt.Errorf("a: %w", transient), fmt.Errorf("b: %w", fatal)), true},
		{errors.Join(transient, errors.New("other")), false},
	}
	for _, c := range cases {
		if got := fault.NeedsOperator(c.err); got != c.want {
			t.Errorf("NeedsOperator(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
