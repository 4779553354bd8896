package silver

import (
	"strings"
	"testing"
)

func TestGate(t *testing.T) {
	cases := []struct {
		snapshot string // "" : no tidemark.snapshot key
		open     bool
		reason   string
	}{
		{"", false, "has not started"},
		{`{"status":"pending"}`, false, "has not started"},
		{`{"status":"running","rows":10,"estimate":100}`, false, "running (10 of about 100 rows)"},
		{`{"status":"running","rows":10,"estimate":-1}`, false, "running (10 rows so far)"},
		{`{"status":"done","rows":100}`, true, ""},
		{`{"status":"skipped"}`, true, ""},
		{`{not json`, false, "unreadable"},
	}
	for _, c := range cases {
		sum := map[string]string{}
		if c.snapshot != "" {
			sum["tidemark.snapshot"] = c.snapshot
		}
		open, reason := gate(sum)
		if open != c.open || !strings.Contains(reason, c.reason) {
			t.Errorf("gate(%s) = %v, %q; want %v, %q", c.snapshot, open, reason, c.open, c.reason)
		}
	}
}
