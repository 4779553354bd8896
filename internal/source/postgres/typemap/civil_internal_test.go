package typemap

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

func TestCivilDays(t *testing.T) {
	// Every day from 4714 BC to beyond 10000 AD converts both ways, and
	// agrees with Go's proleptic Gregorian calendar.
	for z := int64(-2_500_000); z <= 3_000_000; z++ {
		y, m, d := civilFromDays(z)
		if got := daysFromCivil(y, m, d); got != z {
			t.Fatalf("daysFromCivil(civilFromDays(%d)) = %d", z, got)
		}
		if z%997 == 0 {
			gy, gm, gd := time.Unix(z*86400, 0).UTC().Date()
			if int64(gy) != y || int64(gm) != m || int64(gd) != d {
				t.Fatalf("day %d: %d-%d-%d, Go says %d-%d-%d", z, y, m, d, gy, gm, gd)
			}
		}
	}
}

func TestSplitArray(t *testing.T) {
	cases := map[string]struct {
		text  string
		delim byte
		want  []string // "<nil>" for NULL
		err   string
	}{
		"spaces":         {` { 1 , "a" , NULL } `, ',', []string{"1", "a", "<nil>"}, ""},
		"escaped space":  {`{a\ }`, ',', []string{"a "}, ""},
		"escaped NULL":   {`{\NULL}`, ',', []string{"NULL"}, ""},
		"unquoted bslsh": {`{a\,b}`, ',', []string{"a,b"}, ""},
		"semicolon":      {`{a,b;c}`, ';', []string{"a,b", "c"}, ""},
		"empty quoted":   {`{""}`, ',', []string{""}, ""},
		"empty unquoted": {`{a,,b}`, ',', nil, "empty unquoted"},
		"trailing text":  {`{a}x`, ',', nil, "after closing"},
		"no brace":       {`a,b`, ',', nil, "malformed"},
		"unterminated":   {`{"a}`, ',', nil, "unterminated"},
		"nested later":   {`{1,{2}}`, ',', nil, "multi-dimensional"},
		"bounds":         {`[1:1][1:1]={{1}}`, ',', nil, "lower bounds"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := splitArray([]byte(c.text), c.delim)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, e := range got {
				if e == nil {
					s = append(s, "<nil>")
				} else {
					s = append(s, string(e))
				}
			}
			if !slices.Equal(s, c.want) {
				t.Fatalf("got %q, want %q", s, c.want)
			}
		})
	}
}
