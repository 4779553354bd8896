package bench

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Row is one line of the result table.
type Row struct {
	Scenario string // "1a CDC catch-up, pgbench TPC-B (1000000 changes)"
	Tidemark string // the tidemark figure
	Baseline string // the baseline figure, "—" if there is none
	Ratio    string // tidemark ÷ baseline (or as the target defines it), "—" if none
	Target   string
	Met      string // "yes", "no" or "—" (not measurable / no target)
}

// Header is the table's header, in column order.
var Header = []string{"scenario", "tidemark", "baseline", "ratio", "target", "met?"}

// Report is what a run found.
type Report struct {
	Machine []string // one line each: CPU, memory, kernel, PostgreSQL, Go, load
	Rows    []Row
	Details []string // per-repetition figures and notes, one line each
}

// Markdown writes the report: machine, table, details.
func (r *Report) Markdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("## Machine\n\n")
	for _, m := range r.Machine {
		b.WriteString("- " + m + "\n")
	}
	b.WriteString("\n## Results\n\n")
	writeTable(&b, r.Rows)
	if len(r.Details) > 0 {
		b.WriteString("\n## Details\n\n")
		for _, d := range r.Details {
			b.WriteString("- " + d + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeTable(b *strings.Builder, rows []Row) {
	b.WriteString("| " + strings.Join(Header, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat("---|", len(Header)) + "\n")
	for _, r := range rows {
		cells := []string{r.Scenario, r.Tidemark, r.Baseline, r.Ratio, r.Target, r.Met}
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
}

// ParseTable finds the result table in a report's markdown and checks that
// it is well formed: the header, the separator, then rows of exactly six
// non-empty cells, a "met?" cell of yes, no or —, and at least one row. It
// is how the smoke test checks the harness without looking at any time.
func ParseTable(md string) ([]Row, error) {
	lines := strings.Split(md, "\n")
	start := -1
	want := "| " + strings.Join(Header, " | ") + " |"
	for i, l := range lines {
		if strings.TrimSpace(l) == want {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, errors.New("no result table: header line not found")
	}
	if start+1 >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[start+1]), "|---") {
		return nil, errors.New("result table: separator line missing after the header")
	}
	var rows []Row
	for i := start + 2; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := splitRow(l)
		if len(cells) != len(Header) {
			return nil, fmt.Errorf("result table line %d: %d cells, want %d: %s", i+1, len(cells), len(Header), l)
		}
		for j, c := range cells {
			if c == "" {
				return nil, fmt.Errorf("result table line %d: column %q is empty", i+1, Header[j])
			}
		}
		r := Row{cells[0], cells[1], cells[2], cells[3], cells[4], cells[5]}
		if r.Met != "yes" && r.Met != "no" && r.Met != "—" {
			return nil, fmt.Errorf("result table line %d: met? is %q, want yes, no or —", i+1, r.Met)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, errors.New("result table has no rows")
	}
	return rows, nil
}

// splitRow splits "| a | b \| c |" into its cells.
func splitRow(l string) []string {
	l = strings.TrimPrefix(strings.TrimSuffix(l, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(l); i++ {
		if l[i] == '\\' && i+1 < len(l) && l[i+1] == '|' {
			cur.WriteByte('|')
			i++
			continue
		}
		if l[i] == '|' {
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteByte(l[i])
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// median of xs (NaN for none).
// alternate runs tidemark's and the baseline's measurement of repetition
// rep, tidemark first on even repetitions and the baseline first on odd
// ones, so neither always runs on a warmer (or busier) machine.
func alternate(rep int, tidemark, baseline func() error) error {
	first, second := baseline, tidemark
	if rep%2 == 0 {
		first, second = tidemark, baseline
	}
	if err := first(); err != nil {
		return err
	}
	return second()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile of sorted xs, nearest rank (NaN for none).
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	k = max(0, min(k, len(sorted)-1))
	return sorted[k]
}

// rate formats a per-second rate: 1234567 → "1.23M/s".
func rate(v float64, unit string) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case v >= 1e6:
		return fmt.Sprintf("%.2fM %s/s", v/1e6, unit)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk %s/s", v/1e3, unit)
	}
	return fmt.Sprintf("%.0f %s/s", v, unit)
}

// count formats a count with thousands separators: 1000000 → "1,000,000".
func count(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + count(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// ratio formats a ratio with two decimals ("n/a" for NaN or Inf).
func ratio(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

// mib formats bytes as MiB.
func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// ms formats a duration in milliseconds.
func ms(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

// micro formats microseconds with one decimal.
func micro(v float64) string { return fmt.Sprintf("%.1f", v) }

// yesNo renders a met? cell.
func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// spread formats the per-repetition values of a figure for the details.
func spread(xs []float64, f func(float64) string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = f(x)
	}
	return strings.Join(parts, ", ")
}
