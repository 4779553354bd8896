package config

import (
	"errors"
	"fmt"
	"strings"
)

// interpolate expands environment references in a config file before it
// is parsed:
//
//	${VAR}            the value of VAR; an error if VAR is not set
//	${VAR:-default}   the value of VAR, or default if VAR is unset or empty
//	$$                a literal "$"
//
// A "$" followed by anything else is kept as is. Lines whose first
// non-blank character is "#" (comments) are copied unchanged. Because the
// expansion is textual, a value with YAML syntax in it (": ", "#", a
// leading quote) should be quoted in the file: source: "${PG_URL}".
// Values may not contain newlines, so that line numbers in later errors
// still match the file. Errors name the variable and the line, never the
// value or the default.
func interpolate(file string, data []byte, lookup func(string) (string, bool)) ([]byte, error) {
	var out strings.Builder
	out.Grow(len(data))
	var errs []error
	lines := strings.SplitAfter(string(data), "\n")
	for ln, line := range lines {
		lineNo := ln + 1
		if t := strings.TrimLeft(line, " \t"); strings.HasPrefix(t, "#") {
			out.WriteString(line)
			continue
		}
		for i := 0; i < len(line); i++ {
			c := line[i]
			if c != '$' || i+1 >= len(line) {
				out.WriteByte(c)
				continue
			}
			switch line[i+1] {
			case '$':
				out.WriteByte('$')
				i++
				continue
			case '{':
			default:
				out.WriteByte(c)
				continue
			}
			end := strings.IndexByte(line[i+2:], '}')
			if end < 0 {
				errs = append(errs, &Error{File: file, Line: lineNo, Msg: `unterminated "${": expected ${VAR} or ${VAR:-default} (write a literal "$" as "$$")`})
				out.WriteString(line[i:])
				break
			}
			ref := line[i+2 : i+2+end]
			i += 2 + end
			name, def, hasDef := strings.Cut(ref, ":-")
			if !validEnvName(name) {
				// The text is not shown: it may be a misplaced secret.
				msg := "invalid variable reference: expected ${VAR} or ${VAR:-default} where VAR is letters, digits and '_' (write a literal \"$\" as \"$$\")"
				errs = append(errs, &Error{File: file, Line: lineNo, Msg: msg})
				continue
			}
			val, ok := lookup(name)
			switch {
			case hasDef && (!ok || val == ""):
				val = def
			case !ok:
				errs = append(errs, &Error{File: file, Line: lineNo,
					Msg: fmt.Sprintf("environment variable %s is not set (referenced as ${%s}; use ${%s:-default} to give a default)", name, name, name)})
				continue
			}
			if strings.ContainsAny(val, "\r\n") {
				errs = append(errs, &Error{File: file, Line: lineNo,
					Msg: fmt.Sprintf("environment variable %s contains a newline, which cannot be substituted into the file", name)})
				continue
			}
			out.WriteString(val)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return []byte(out.String()), nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case i > 0 && r >= '0' && r <= '9':
		default:
			return false
		}
	}
	return true
}
