package config

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// GoldEveryAfterMerge is the value of a gold table's every: that refreshes
// it whenever a silver table its SQL reads has a new snapshot.
const GoldEveryAfterMerge = "after_each_silver_merge"

// MinGoldEvery is the shortest every: duration of a gold table.
const MinGoldEvery = Duration(time.Second)

// GoldTable declares one gold table: gold.<source>.<name>, the result of
// SQL over this source's silver tables, refreshed by tidemark run (see
// docs/gold.md). In YAML:
//
//	gold:
//	  - name: orders_per_customer
//	    sql: SELECT customer_id, count(*) AS orders FROM silver.public.orders GROUP BY 1
//	    every: 1m            # or after_each_silver_merge (the default)
type GoldTable struct {
	// Name names the table gold.<source>.<name>: [a-z_][a-z0-9_]*.
	Name string
	// SQL is one SELECT statement (DuckDB's dialect) that names silver
	// tables as silver.<schema>.<table>.
	SQL string
	// Every is the refresh interval; 0 when AfterMerge.
	Every Duration
	// AfterMerge: refresh when a silver table the SQL reads moved.
	AfterMerge bool

	line int // where the entry starts in the config file
}

// EveryString is every: as the config takes it.
func (g GoldTable) EveryString() string {
	if g.AfterMerge {
		return GoldEveryAfterMerge
	}
	return g.Every.String()
}

// GoldTables is the gold: list.
type GoldTables []GoldTable

// UnmarshalYAML reads the list of {name, sql, every} mappings. Problems of
// one entry are left to Validate, which names the entry.
func (g *GoldTables) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("expected a list of gold tables ({name, sql, every}), got %s", kindName(n))
	}
	var out GoldTables
	for i, e := range n.Content {
		e = resolveAlias(e)
		if e.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: gold[%d]: expected a mapping with name, sql and every, got %s", e.Line, i, kindName(e))
		}
		t := GoldTable{line: e.Line}
		seen := map[string]bool{}
		for j := 0; j+1 < len(e.Content); j += 2 {
			k, v := resolveAlias(e.Content[j]), resolveAlias(e.Content[j+1])
			if seen[k.Value] {
				return fmt.Errorf("line %d: gold[%d].%s: duplicate key", k.Line, i, k.Value)
			}
			seen[k.Value] = true
			if v.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: gold[%d].%s: expected a string, got %s", v.Line, i, k.Value, kindName(v))
			}
			switch k.Value {
			case "name":
				t.Name = v.Value
			case "sql":
				t.SQL = v.Value
			case "every":
				if err := t.setEvery(v.Value); err != nil {
					return fmt.Errorf("line %d: gold[%d].every: %v", v.Line, i, err)
				}
			default:
				return fmt.Errorf("line %d: gold[%d].%s: unknown key%s", k.Line, i, k.Value, suggest(k.Value, "gold", []string{"name", "sql", "every"}))
			}
		}
		if !seen["every"] {
			t.AfterMerge = true
		}
		out = append(out, t)
	}
	*g = out
	return nil
}

func (t *GoldTable) setEvery(s string) error {
	s = strings.TrimSpace(s)
	if s == GoldEveryAfterMerge || s == "" {
		t.AfterMerge, t.Every = true, 0
		return nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration (30s, 5m, 1h) or %s, got %s", GoldEveryAfterMerge, showValue(s))
	}
	t.AfterMerge, t.Every = false, d
	return nil
}

// Set adds one gold table from the --gold flag, NAME=SQL (refreshed after
// each silver merge); repeat the flag for more tables.
func (g *GoldTables) Set(v string) error {
	name, sql, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("expected NAME=SQL, got %s", showValue(v))
	}
	*g = append(*g, GoldTable{Name: strings.TrimSpace(name), SQL: sql, AfterMerge: true})
	return nil
}

// String lists the tables by name.
func (g *GoldTables) String() string {
	if g == nil {
		return ""
	}
	var names []string
	for _, t := range *g {
		names = append(names, t.Name)
	}
	return strings.Join(names, ",")
}

// Type names the flag's value in --help.
func (g *GoldTables) Type() string { return "name=sql" }

// Named returns the gold table called name, or false.
func (g GoldTables) Named(name string) (GoldTable, bool) {
	for _, t := range g {
		if t.Name == name {
			return t, true
		}
	}
	return GoldTable{}, false
}

// validateGold checks each entry: a valid, unique name, some SQL, an every
// of at least MinGoldEvery. Whether the SQL runs is checked against the
// lake when tidemark run or tidemark gold refresh starts (gold.Check).
func (c *Config) validateGold(k *checker) {
	if len(c.Gold) > 0 && !c.Silver.IsEnabled() {
		k.bad("gold", "gold tables are computed from silver: they need silver.enabled: true")
	}
	seen := map[string]int{}
	for i, t := range c.Gold {
		p := fmt.Sprintf("gold[%d]", i)
		bad := func(key, format string, args ...any) {
			e := &Error{Path: p + "." + key, Msg: fmt.Sprintf(format, args...)}
			if t.line > 0 {
				e.File, e.Line = c.file, t.line
			}
			k.errs = append(k.errs, e)
		}
		switch {
		case t.Name == "":
			bad("name", "required: the gold table's name, [a-z_][a-z0-9_]* (the table is gold.<source>.<name>)")
		case !nameRE.MatchString(t.Name):
			bad("name", "must match ^[a-z_][a-z0-9_]*$ (lower-case letters, digits, '_'), got %s", showValue(t.Name))
		default:
			if j, dup := seen[t.Name]; dup {
				bad("name", "%s is declared twice (also gold[%d]); give each gold table its own name", t.Name, j)
			}
			seen[t.Name] = i
		}
		if strings.TrimSpace(t.SQL) == "" {
			bad("sql", "required: one SELECT over this source's silver tables, named silver.<schema>.<table>")
		}
		if !t.AfterMerge && t.Every < MinGoldEvery {
			bad("every", "must be at least %s or %s, got %s", MinGoldEvery, GoldEveryAfterMerge, t.Every)
		}
	}
}
