package config

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as "500ms", "1s", "4h" in YAML and
// on the command line.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// Set implements pflag.Value.
func (d *Duration) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Type implements pflag.Value.
func (d *Duration) Type() string { return "duration" }

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a duration such as \"1s\", got %s", kindName(n))
	}
	return d.Set(n.Value)
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalText implements encoding.TextMarshaler (JSON, slog).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error { return d.Set(string(b)) }

func parseDuration(s string) (Duration, error) {
	t := strings.TrimSpace(s)
	v, err := time.ParseDuration(t)
	if err != nil {
		why := "use a number with a unit: ns, us, ms, s, m, h (e.g. \"500ms\", \"1s\", \"4h\")"
		if _, nerr := strconv.ParseFloat(t, 64); nerr == nil && t != "0" {
			why = "missing unit; " + why
		}
		return 0, fmt.Errorf("invalid duration %s: %s", showValue(s), why)
	}
	return Duration(v), nil
}

// ByteSize is a number of bytes, written as "1024", "512KB" (powers of
// 1000) or "64MiB" (powers of 1024). String prints IEC units.
type ByteSize int64

// Common sizes.
const (
	KiB ByteSize = 1 << 10
	MiB ByteSize = 1 << 20
	GiB ByteSize = 1 << 30
	TiB ByteSize = 1 << 40
)

// String prints b in the largest IEC unit that divides it exactly, so that
// it parses back to the same value: "64MiB", "1536KiB", "1000B".
func (b ByteSize) String() string {
	if b == 0 {
		return "0B"
	}
	units := []struct {
		n    ByteSize
		name string
	}{{TiB * 1024, "PiB"}, {TiB, "TiB"}, {GiB, "GiB"}, {MiB, "MiB"}, {KiB, "KiB"}}
	for _, u := range units {
		if b%u.n == 0 {
			return strconv.FormatInt(int64(b/u.n), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// Set implements pflag.Value.
func (b *ByteSize) Set(s string) error {
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Type implements pflag.Value.
func (b *ByteSize) Type() string { return "bytes" }

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a size such as \"64MiB\", got %s", kindName(n))
	}
	return b.Set(n.Value)
}

// MarshalYAML implements yaml.Marshaler.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

// MarshalText implements encoding.TextMarshaler.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (b *ByteSize) UnmarshalText(t []byte) error { return b.Set(string(t)) }

var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12, "p": 1e15, "pb": 1e15,
	"ki": 1 << 10, "kib": 1 << 10, "mi": 1 << 20, "mib": 1 << 20, "gi": 1 << 30, "gib": 1 << 30,
	"ti": 1 << 40, "tib": 1 << 40, "pi": 1 << 50, "pib": 1 << 50,
}

const byteUnitHelp = "use a number of bytes with an optional unit: B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), e.g. \"64MiB\""

// ParseByteSize parses "1024", "512KB", "64MiB", "1.5GiB" (units are
// case-insensitive; a space between number and unit is allowed).
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.' || t[i] == '_') {
		i++
	}
	num := strings.ReplaceAll(t[:i], "_", "")
	unit := strings.ToLower(strings.TrimSpace(t[i:]))
	fail := func(why string) (ByteSize, error) {
		return 0, fmt.Errorf("invalid byte size %s: %s", showValue(s), why)
	}
	if strings.HasPrefix(t, "-") {
		return fail("must not be negative")
	}
	if num == "" {
		return fail(byteUnitHelp)
	}
	mult, ok := byteUnits[unit]
	if !ok {
		return fail(fmt.Sprintf("unknown unit %q; %s", t[i:], byteUnitHelp))
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return fail(byteUnitHelp)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return fail("not a whole number of bytes")
	}
	if !r.Num().IsInt64() {
		return fail("too large")
	}
	return ByteSize(r.Num().Int64()), nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	return "a scalar"
}

// showValue quotes a user-supplied value for an error message, with any
// password it might contain redacted.
func showValue(s string) string {
	const maxLen = 80
	s = RedactURL(s)
	if len(s) > maxLen {
		s = s[:maxLen] + "..."
	}
	return strconv.Quote(s)
}
