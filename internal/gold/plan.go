package gold

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// This file decides whether a gold query can be refreshed incrementally
// (mode incremental): from DuckDB's parse tree of the query
// (json_serialize_sql), not from its text.
//
// A query decomposes when it is one SELECT ... FROM one silver table
// [WHERE ...] GROUP BY ..., every column of its result is either a GROUP BY
// expression or one of count(*), count(x), sum(x), min(x), max(x) (no
// DISTINCT, FILTER or ORDER BY inside them), count(*) is among them (it
// tells when a group becomes empty), and nothing in it depends on when it
// runs (now(), random(), ...) or on other rows (subqueries, window
// functions). Such a query's result changes, when some rows of the table
// change, by the same query over the changed rows' old versions
// (subtracted) and new versions (added): see incremental.go.

// Aggregate kinds of an incremental plan's result columns.
const (
	aggGroup = "group" // a GROUP BY expression
	aggRows  = "count_star"
	aggCount = "count"
	aggSum   = "sum"
	aggMin   = "min"
	aggMax   = "max"
)

// plan is how an incremental refresh combines a query's result columns:
// Kinds[i] is the kind of result column i.
type plan struct {
	Kinds []string
}

// volatile are DuckDB functions whose value depends on when or how often
// they run: a query using one is recomputed in full.
var volatile = map[string]bool{
	"now": true, "current_timestamp": true, "get_current_timestamp": true, "transaction_timestamp": true,
	"current_date": true, "today": true, "current_time": true, "get_current_time": true,
	"current_localtimestamp": true, "current_localtime": true, "localtimestamp": true, "localtime": true,
	"random": true, "setseed": true, "uuid": true, "gen_random_uuid": true, "uuidv4": true, "uuidv7": true,
	"nextval": true, "currval": true,
}

// analyze returns the incremental plan of query, or why it must be
// recomputed in full. cols are the query's result columns (describe).
func (e *engine) analyze(ctx context.Context, query string, cols []Column) (*plan, string, error) {
	var js string
	if err := e.conn.QueryRowContext(ctx, "SELECT CAST(json_serialize_sql($1::VARCHAR) AS VARCHAR)", query).Scan(&js); err != nil {
		return nil, "", err
	}
	p, why := planOf(js, cols)
	return p, why, nil
}

// planOf is analyze on the parse tree js.
func planOf(js string, cols []Column) (*plan, string) {
	var tree struct {
		Error      bool             `json:"error"`
		Statements []map[string]any `json:"statements"`
	}
	if err := json.Unmarshal([]byte(js), &tree); err != nil || tree.Error || len(tree.Statements) != 1 {
		return nil, "the query's parse tree cannot be read"
	}
	node, _ := tree.Statements[0]["node"].(map[string]any)
	if str(node, "type") != "SELECT_NODE" {
		return nil, "the query is not a plain SELECT (UNION, VALUES, ...)"
	}
	if m, _ := node["modifiers"].([]any); len(m) > 0 {
		return nil, "the query has ORDER BY, LIMIT or DISTINCT"
	}
	if cte, _ := node["cte_map"].(map[string]any); cte != nil {
		if m, _ := cte["map"].([]any); len(m) > 0 {
			return nil, "the query has a WITH clause"
		}
	}
	from, _ := node["from_table"].(map[string]any)
	if str(from, "type") != "BASE_TABLE" || from["sample"] != nil || from["at_clause"] != nil {
		return nil, "the query reads more than one table (a join or a subquery in FROM)"
	}
	for _, k := range []string{"having", "qualify", "sample"} {
		if node[k] != nil {
			return nil, "the query has " + strings.ToUpper(k)
		}
	}
	if str(node, "aggregate_handling") != "STANDARD_HANDLING" {
		return nil, "the query uses GROUP BY ALL"
	}
	if why := walk(node); why != "" {
		return nil, why
	}
	sel, _ := node["select_list"].([]any)
	groups, _ := node["group_expressions"].([]any)
	if len(groups) == 0 {
		return nil, "the query has no GROUP BY"
	}
	if sets, _ := node["group_sets"].([]any); len(sets) != 1 {
		return nil, "the query has GROUPING SETS, ROLLUP or CUBE"
	}
	if len(sel) != len(cols) {
		return nil, "the query's select list does not match its result (a * or COLUMNS)"
	}
	p := &plan{Kinds: make([]string, len(sel))}
	// Each GROUP BY expression is a column of the result: by position, by
	// alias or by being the same expression.
	for _, g := range groups {
		gm, _ := g.(map[string]any)
		i := groupItem(gm, sel)
		if i < 0 {
			return nil, "a GROUP BY expression is not a column of the result: select it"
		}
		p.Kinds[i] = aggGroup
	}
	rows := false
	for i, it := range sel {
		if p.Kinds[i] == aggGroup {
			continue
		}
		m, _ := it.(map[string]any)
		fn := strings.ToLower(str(m, "function_name"))
		if str(m, "class") != "FUNCTION" || !(fn == aggRows || fn == aggCount || fn == aggSum || fn == aggMin || fn == aggMax) {
			return nil, fmt.Sprintf("result column %s is neither a GROUP BY expression nor count(*), count, sum, min or max (avg: select sum and count)", cols[i].Name)
		}
		if m["distinct"] == true || m["filter"] != nil || hasOrder(m) {
			return nil, fmt.Sprintf("result column %s aggregates with DISTINCT, FILTER or ORDER BY", cols[i].Name)
		}
		if fn == aggCount && len(args(m)) == 0 {
			fn = aggRows
		}
		if fn == aggSum && (cols[i].Cast == "DOUBLE" || cols[i].Cast == "FLOAT") {
			return nil, fmt.Sprintf("result column %s sums floating-point values, which an incremental refresh would round differently", cols[i].Name)
		}
		p.Kinds[i] = fn
		rows = rows || fn == aggRows
	}
	if !rows {
		return nil, "the query has no count(*): add one (it tells when a group becomes empty)"
	}
	return p, ""
}

// groupItem returns the index of the select item group expression g
// names, -1 if none.
func groupItem(g map[string]any, sel []any) int {
	if str(g, "class") == "CONSTANT" {
		v, _ := g["value"].(map[string]any)
		if n, ok := v["value"].(float64); ok && n >= 1 && int(n) <= len(sel) && n == float64(int(n)) {
			return int(n) - 1
		}
		return -1
	}
	if str(g, "class") == "COLUMN_REF" {
		if names, _ := g["column_names"].([]any); len(names) == 1 {
			for i, it := range sel {
				if m, _ := it.(map[string]any); strings.EqualFold(str(m, "alias"), fmt.Sprint(names[0])) {
					return i
				}
			}
		}
	}
	for i, it := range sel {
		if m, _ := it.(map[string]any); reflect.DeepEqual(strip(m), strip(g)) {
			return i
		}
	}
	return -1
}

// strip returns v without the keys that do not change what an expression
// computes (its alias, where it is in the text).
func strip(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, vv := range x {
			if k == "alias" || k == "query_location" {
				continue
			}
			out[k] = strip(vv)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, vv := range x {
			out[i] = strip(vv)
		}
		return out
	}
	return v
}

// walk returns why the expression tree v cannot be maintained
// incrementally ("" if it can): a subquery, a window function, a volatile
// function.
func walk(v any) string {
	switch x := v.(type) {
	case map[string]any:
		switch str(x, "class") {
		case "SUBQUERY":
			return "the query has a subquery"
		case "WINDOW":
			return "the query has a window function"
		case "STAR":
			return "the query selects * or COLUMNS(...)"
		case "FUNCTION":
			if volatile[strings.ToLower(str(x, "function_name"))] {
				return fmt.Sprintf("the query calls %s(), whose value changes from one run to the next", str(x, "function_name"))
			}
		}
		for k, vv := range x {
			if k == "from_table" {
				continue
			}
			if why := walk(vv); why != "" {
				return why
			}
		}
	case []any:
		for _, vv := range x {
			if why := walk(vv); why != "" {
				return why
			}
		}
	}
	return ""
}

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func args(m map[string]any) []any {
	a, _ := m["children"].([]any)
	return a
}

func hasOrder(m map[string]any) bool {
	ob, _ := m["order_bys"].(map[string]any)
	o, _ := ob["orders"].([]any)
	return len(o) > 0
}
