package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// registeredMetrics returns the name and kind ("histogram" or "") of every
// metric newMetrics registers.
func registeredMetrics(t *testing.T) map[string]string {
	t.Helper()
	m := newMetrics(prometheus.NewRegistry(), "src", 1<<30)
	fq := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	out := map[string]string{}
	for _, c := range m.collectors {
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		kind := ""
		if _, ok := c.(*prometheus.HistogramVec); ok {
			kind = "histogram"
		}
		for d := range ch {
			mm := fq.FindStringSubmatch(d.String())
			if mm == nil {
				t.Fatalf("cannot read the name of %s", d)
			}
			out[mm[1]] = kind
		}
	}
	return out
}

// TestDocsNameEveryMetric: docs/metrics.md's table lists exactly the
// metrics /metrics serves, each with its type, and every name follows
// tidemark_<subsystem>_<name>.
func TestDocsNameEveryMetric(t *testing.T) {
	reg := registeredMetrics(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(tidemark_[a-z_]+)` \\| ([a-z]+) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = m[2]
	}
	if len(reg) < 20 {
		t.Fatalf("found only %d registered metrics: the test is stale", len(reg))
	}
	subsystems := []string{"capture", "load", "bronze", "snapshot", "silver", "gold", "maintain", "lake", "errors", "retries", "memory"}
	for name, kind := range reg {
		typ, ok := documented[name]
		if !ok {
			t.Errorf("docs/metrics.md has no row for %s", name)
		} else if (kind == "histogram") != (typ == "histogram") {
			t.Errorf("docs/metrics.md says %s is a %s", name, typ)
		}
		parts := strings.SplitN(strings.TrimPrefix(name, "tidemark_"), "_", 2)
		if !slices.Contains(subsystems, parts[0]) {
			t.Errorf("%s: subsystem %q is not one of %v", name, parts[0], subsystems)
		}
	}
	for name := range documented {
		if _, ok := reg[name]; !ok {
			t.Errorf("docs/metrics.md documents %s, which is not registered", name)
		}
	}
}

// TestAlertsAndDashboardNameRealMetrics: every tidemark_ series the
// example alert rules and the Grafana dashboard query exists (a
// histogram's _bucket, _count and _sum included), and the dashboard is JSON.
func TestAlertsAndDashboardNameRealMetrics(t *testing.T) {
	reg := registeredMetrics(t)
	exists := func(name string) bool {
		if _, ok := reg[name]; ok {
			return true
		}
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(name, suf); ok && reg[base] == "histogram" {
				return true
			}
		}
		return false
	}
	series := regexp.MustCompile(`tidemark_[a-z_]+`)
	for _, f := range []string{"metrics-alerts.yml", "metrics-dashboard.json", "metrics.md"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(f, ".json") && !json.Valid(b) {
			t.Errorf("docs/%s is not valid JSON", f)
		}
		seen := map[string]bool{}
		for _, name := range series.FindAllString(string(b), -1) {
			if !seen[name] && !exists(name) {
				t.Errorf("docs/%s names %s, which tidemark does not serve", f, name)
			}
			seen[name] = true
		}
		if len(seen) < 5 {
			names := make([]string, 0, len(seen))
			for n := range seen {
				names = append(names, n)
			}
			sort.Strings(names)
			t.Errorf("docs/%s names only %v", f, names)
		}
	}
}
