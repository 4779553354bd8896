package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/config"
)

func TestParseByteSize(t *testing.T) {
	tests := []struct {
		in      string
		want    config.ByteSize
		wantErr string
	}{
		{in: "1024", want: 1024},
		{in: "0", want: 0},
		{in: "64MiB", want: 64 << 20},
		{in: "64 mib", want: 64 << 20},
		{in: "1GiB", want: 1 << 30},
		{in: "1Gi", want: 1 << 30},
		{in: "512KB", want: 512_000},
		{in: "512kB", want: 512_000},
		{in: "2MB", want: 2_000_000},
		{in: "1.5KiB", want: 1536},
		{in: "10_000", want: 10000},
		{in: "1B", want: 1},
		{in: "0.5B", wantErr: "not a whole number of bytes"},
		{in: "64MB/s", wantErr: `unknown unit "MB/s"`},
		{in: "-1", wantErr: "must not be negative"},
		{in: "MiB", wantErr: "use a number of bytes"},
		{in: "", wantErr: "use a number of bytes"},
		{in: "99999999PiB", wantErr: "too large"},
	}
	for _, tt := range tests {
		got, err := config.ParseByteSize(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseByteSize(%q) = %v, %v; want error %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseByteSize(%q) = %v, %v; want %d", tt.in, int64(got), err, tt.want)
		}
	}
}

func TestByteSizeString(t *testing.T) {
	tests := []struct {
		in   config.ByteSize
		want string
	}{
		{0, "0B"}, {1, "1B"}, {1000, "1000B"}, {1024, "1KiB"}, {1536, "1536B"},
		{64 << 20, "64MiB"}, {1 << 30, "1GiB"}, {3 << 40, "3TiB"}, {512_000, "500KiB"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("ByteSize(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
		}
		back, err := config.ParseByteSize(tt.in.String())
		if err != nil || back != tt.in {
			t.Errorf("%q does not parse back to %d: %v, %v", tt.in.String(), int64(tt.in), int64(back), err)
		}
	}
}

func TestDuration(t *testing.T) {
	var d config.Duration
	for in, want := range map[string]time.Duration{"1s": time.Second, "500ms": 500 * time.Millisecond, "4h": 4 * time.Hour, " 1m30s ": 90 * time.Second, "0": 0} {
		if err := d.Set(in); err != nil || d.Std() != want {
			t.Errorf("Set(%q) = %v, %v; want %v", in, d, err, want)
		}
	}
	for in, wantErr := range map[string]string{"5": "missing unit", "1 minute": "invalid duration", "": "invalid duration"} {
		if err := d.Set(in); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("Set(%q): got %v, want %q", in, err, wantErr)
		}
	}
	eq(t, "String", config.Duration(1500*time.Millisecond).String(), "1.5s")
}
