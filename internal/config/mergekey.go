package config

import (
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MergeKeys declares, per source table ("schema.table", the tables: syntax),
// the columns silver merges by instead of the table's primary key: the
// override for a table without a primary key, or one whose key changes. In
// YAML a mapping from table to a list of columns:
//
//	merge_keys:
//	  public.events: [tenant, event_id]
//	  '"Sales"."Orders"': [order_no]
//
// On the command line, --merge-keys 'public.events=tenant,event_id',
// repeated for each table. Column names are taken as written (no case
// folding): they are the source's column names.
type MergeKeys map[string][]string

// UnmarshalYAML reads the mapping of table to column list (or to one
// comma-separated string).
func (m *MergeKeys) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("expected a mapping of schema.table to a list of columns, got %s", kindName(n))
	}
	out := MergeKeys{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolveAlias(n.Content[i]), resolveAlias(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: keys must be table names (schema.table), got %s", k.Line, kindName(k))
		}
		if _, dup := out[k.Value]; dup {
			return fmt.Errorf("line %d: %s is listed twice", k.Line, k.Value)
		}
		var cols []string
		switch v.Kind {
		case yaml.ScalarNode:
			cols = splitList(v.Value)
		case yaml.SequenceNode:
			for _, e := range v.Content {
				if e = resolveAlias(e); e.Kind != yaml.ScalarNode {
					return fmt.Errorf("line %d: %s: columns must be names, got %s", e.Line, k.Value, kindName(e))
				}
				cols = append(cols, e.Value)
			}
		default:
			return fmt.Errorf("line %d: %s: expected a list of columns, got %s", v.Line, k.Value, kindName(v))
		}
		out[k.Value] = cols
	}
	*m = out
	return nil
}

// Set adds one "schema.table=col1,col2" (the --merge-keys flag; repeat it
// for more tables).
func (m *MergeKeys) Set(v string) error {
	table, cols, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf(`expected schema.table=column[,column...], got %s`, showValue(v))
	}
	if *m == nil {
		*m = MergeKeys{}
	}
	(*m)[strings.TrimSpace(table)] = splitList(cols)
	return nil
}

// String lists the entries as the flag takes them, sorted by table.
func (m *MergeKeys) String() string {
	if m == nil || len(*m) == 0 {
		return ""
	}
	var parts []string
	for t, cols := range *m {
		parts = append(parts, t+"="+strings.Join(cols, ","))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// Type names the flag's value in --help.
func (m *MergeKeys) Type() string { return "table=columns" }

// Parsed returns the declared merge keys by table. After a successful
// Validate it does not fail.
func (m MergeKeys) Parsed() (map[TableName][]string, error) {
	out := make(map[TableName][]string, len(m))
	for s, cols := range m {
		t, err := ParseTableName(s)
		if err != nil {
			return nil, &Error{Path: mergeKeyPath(s), Msg: err.Error()}
		}
		out[t] = cols
	}
	return out, nil
}

func mergeKeyPath(table string) string { return fmt.Sprintf("merge_keys[%q]", table) }

// validateMergeKeys checks every entry: a table name tables: would take,
// named once, and a non-empty list of distinct, non-empty column names.
func (c *Config) validateMergeKeys(k *checker) {
	seen := map[TableName]string{}
	names := make([]string, 0, len(c.MergeKeys))
	for s := range c.MergeKeys {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		p := mergeKeyPath(s)
		t, err := ParseTableName(s)
		if err != nil {
			k.badFrom(p, "merge_keys", "%v", err)
			continue
		}
		if prev, dup := seen[t]; dup {
			k.badFrom(p, "merge_keys", "%s is the table %s names too", t, mergeKeyPath(prev))
			continue
		}
		seen[t] = s
		cols := c.MergeKeys[s]
		if len(cols) == 0 {
			k.badFrom(p, "merge_keys", "%s: list at least one column (the columns silver merges the table by)", t)
			continue
		}
		have := map[string]bool{}
		for _, col := range cols {
			switch {
			case strings.TrimSpace(col) == "":
				k.badFrom(p, "merge_keys", "%s: an empty column name", t)
			case have[col]:
				k.badFrom(p, "merge_keys", "%s: column %q is listed twice", t, col)
			}
			have[col] = true
		}
	}
}
