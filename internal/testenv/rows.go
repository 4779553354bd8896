package testenv

import (
	"math"
	"slices"
	"strconv"
	"testing"
)

// PyIcebergFloat parses a float as scripts/pyiceberg_read.py prints it (a
// JSON number, or the strings "NaN", "Infinity", "-Infinity"), given as
// its text (fmt.Sprint of a json.Number or a string).
func PyIcebergFloat(s string) (float64, error) {
	switch s {
	case "NaN":
		return math.NaN(), nil
	case "Infinity":
		return math.Inf(1), nil
	case "-Infinity":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(s, 64)
}

// CompareRows requires got to hold exactly want's keys, each row with
// want's value in every column want has (rows in a canonical text form:
// key -> column -> text). It reports the first 20 differences and logs
// the count.
func CompareRows(t testing.TB, what string, want, got map[string]map[string]string) {
	t.Helper()
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 20 {
			t.Errorf(what+": "+format, args...)
		}
	}
	for _, k := range sortedKeys(want) {
		g, ok := got[k]
		if !ok {
			report("id %s is in the source, not in the lake (source %v)", k, want[k])
			continue
		}
		for _, c := range sortedKeys(want[k]) {
			if g[c] != want[k][c] {
				report("id %s column %s: %s, source %s", k, c, g[c], want[k][c])
			}
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			report("id %s is not in the source (lake %v)", k, got[k])
		}
	}
	if bad > 20 {
		t.Errorf("%s: %d mismatches in all", what, bad)
	}
	t.Logf("%s: %d rows, %d mismatches", what, len(want), bad)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
