package config

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxIdentLen is PostgreSQL's NAMEDATALEN-1: longer names are truncated by
// the server, and would then not match.
const maxIdentLen = 63

// TableName is a parsed "schema.table" from the tables list.
type TableName struct {
	Schema string
	Table  string
}

// String returns schema.table with each part double-quoted only if it
// needs to be (so it parses back to the same name).
func (t TableName) String() string {
	return quoteIdentIfNeeded(t.Schema) + "." + quoteIdentIfNeeded(t.Table)
}

// Quoted returns "schema"."table", safe to paste into SQL.
func (t TableName) Quoted() string { return quoteIdent(t.Schema) + "." + quoteIdent(t.Table) }

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func quoteIdentIfNeeded(s string) string {
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r > utf8.RuneSelf && unicode.IsLetter(r) && !unicode.IsUpper(r) ||
			i > 0 && (r >= '0' && r <= '9' || r == '$')) {
			return quoteIdent(s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}

const tableSyntax = `expected "schema.table"; names are folded to lower case unless double-quoted, and a name containing '.' must be quoted: "my.schema"."Table"`

// ParseTableName parses "schema.table" with PostgreSQL identifier rules:
// unquoted names are folded to lower case, double-quoted ones are kept as
// written ("" inside quotes is a literal quote), so "My.Schema"."T" names
// schema My.Schema and table T.
func ParseTableName(s string) (TableName, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return TableName{}, errors.New("empty table name; " + tableSyntax)
	}
	if strings.Contains(t, "*") {
		return TableName{}, fmt.Errorf("wildcards are not supported, got %s; list the tables, or leave tables empty for all tables", showValue(s))
	}
	schema, rest, err := parseIdent(t)
	if err != nil {
		return TableName{}, fmt.Errorf("%v in %s; %s", err, showValue(s), tableSyntax)
	}
	if rest == "" {
		hint := ""
		if !strings.HasPrefix(t, `"`) {
			hint = fmt.Sprintf(" (did you mean %q?)", "public."+t)
		}
		return TableName{}, fmt.Errorf("missing schema in %s%s; %s", showValue(s), hint, tableSyntax)
	}
	if rest[0] != '.' {
		return TableName{}, fmt.Errorf("unexpected text after the schema name in %s; %s", showValue(s), tableSyntax)
	}
	table, rest, err := parseIdent(rest[1:])
	if err != nil {
		return TableName{}, fmt.Errorf("%v in %s; %s", err, showValue(s), tableSyntax)
	}
	if rest != "" {
		if rest[0] == '.' {
			return TableName{}, fmt.Errorf("too many dots in %s: %s", showValue(s), tableSyntax)
		}
		return TableName{}, fmt.Errorf("unexpected text after the table name in %s; %s", showValue(s), tableSyntax)
	}
	for _, id := range []string{schema, table} {
		if len(id) > maxIdentLen {
			return TableName{}, fmt.Errorf("name %q is longer than %d bytes (PostgreSQL's limit)", id, maxIdentLen)
		}
	}
	return TableName{Schema: schema, Table: table}, nil
}

// parseIdent reads one identifier from the front of s.
func parseIdent(s string) (ident, rest string, err error) {
	if s == "" {
		return "", "", errors.New("missing name")
	}
	if s[0] == '"' {
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] != '"' {
				b.WriteByte(s[i])
				continue
			}
			if i+1 < len(s) && s[i+1] == '"' {
				b.WriteByte('"')
				i++
				continue
			}
			if b.Len() == 0 {
				return "", "", errors.New("empty quoted name")
			}
			return b.String(), s[i+1:], nil
		}
		return "", "", errors.New("unterminated double quote")
	}
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		ok := r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r > utf8.RuneSelf && unicode.IsLetter(r) ||
			i > 0 && (r >= '0' && r <= '9' || r == '$')
		if !ok {
			break
		}
		i += size
	}
	if i == 0 {
		return "", "", errors.New("a name must start with a letter or '_' (quote it otherwise)")
	}
	// PostgreSQL folds unquoted identifiers to lower case (ASCII only).
	return strings.Map(func(r rune) rune {
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s[:i]), s[i:], nil
}

// LakeNameProblem says why a source schema or table name cannot be stored
// in the lake exactly ("" if it can). kind is "schema" or "table". Quotes,
// spaces, unicode, reserved words and mixed case are fine; these are not
// (docs/type-mapping.md, "Names"):
//   - '.': Iceberg identifiers are written as dot-joined levels (the JDBC
//     and PyIceberg SQL catalogs store a namespace that way), so
//     bronze.src."a.b".t would be read back as bronze.src.a.b.t;
//   - '/' and control characters: iceberg-go refuses them in identifiers;
//   - the schema _building: silver.<source>._building holds silver tables
//     that are being built.
func LakeNameProblem(kind, name string) string {
	switch {
	case strings.Contains(name, "."):
		return "contains '.', which Iceberg catalogs use to separate namespace levels: PyIceberg, Spark and Trino would read another name"
	case strings.Contains(name, "/"):
		return "contains '/', which Iceberg identifiers may not hold"
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return "contains a control character, which Iceberg identifiers may not hold"
	case kind == "schema" && name == "_building":
		return "is reserved: silver.<source>._building holds tidemark's silver tables that are being built"
	}
	return ""
}

// TableNames parses Tables. After a successful Validate it does not fail.
func (c *Config) TableNames() ([]TableName, error) {
	out := make([]TableName, 0, len(c.Tables))
	for i, s := range c.Tables {
		t, err := ParseTableName(s)
		if err != nil {
			return nil, &Error{Path: fmt.Sprintf("tables[%d]", i), Msg: err.Error()}
		}
		out = append(out, t)
	}
	return out, nil
}
