package typemap

import (
	"errors"
	"fmt"
)

var (
	errMultiDim    = errors.New("multi-dimensional array has no list mapping")
	errLowerBounds = errors.New("array with non-default lower bounds has no list mapping")
)

// arrayDecoder decodes a one-dimensional array literal into []any, each
// element decoded by elem (nil for NULL elements).
func arrayDecoder(elem decodeFunc, delim byte) decodeFunc {
	return func(text []byte) (any, error) {
		elems, err := splitArray(text, delim)
		if err != nil {
			return nil, err
		}
		out := make([]any, len(elems))
		for i, e := range elems {
			if e == nil {
				continue
			}
			v, err := elem(e)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i+1, err)
			}
			out[i] = v
		}
		return out, nil
	}
}

// splitArray parses PostgreSQL's array literal syntax (as array_out writes
// it, and as array_in reads it) for a one-dimensional array: `{a,b,...}`
// where an element is NULL (unquoted, any case), or a bare word in which a
// backslash escapes the next byte, or a double-quoted string in which a
// backslash escapes the next byte. It returns each element's text with
// quoting removed, nil for NULL. Non-nil results are never nil slices,
// even for the empty string.
//
// A leading dimension decoration (`[0:2]={...}`, written when a lower
// bound is not 1) and nested braces (more than one dimension) are errors:
// neither has a list<T> form.
func splitArray(text []byte, delim byte) ([][]byte, error) {
	i := skipSpace(text, 0)
	if i < len(text) && text[i] == '[' {
		return nil, errLowerBounds
	}
	if i >= len(text) || text[i] != '{' {
		return nil, errors.New("malformed array literal")
	}
	i = skipSpace(text, i+1)
	elems := [][]byte{}
	if i < len(text) && text[i] == '}' {
		if skipSpace(text, i+1) != len(text) {
			return nil, errors.New("malformed array literal")
		}
		return elems, nil
	}
	for {
		i = skipSpace(text, i)
		if i >= len(text) {
			return nil, errors.New("malformed array literal")
		}
		var elem []byte
		switch text[i] {
		case '{':
			return nil, errMultiDim
		case '"':
			elem = []byte{}
			i++
			for {
				if i >= len(text) {
					return nil, errors.New("malformed array literal: unterminated quoted element")
				}
				c := text[i]
				if c == '"' {
					i++
					break
				}
				if c == '\\' {
					i++
					if i >= len(text) {
						return nil, errors.New("malformed array literal")
					}
					c = text[i]
				}
				elem = append(elem, c)
				i++
			}
			i = skipSpace(text, i)
		default:
			elem = []byte{}
			escaped := false
			// end of the element without trailing (unescaped) spaces
			keep := 0
			for i < len(text) && text[i] != delim && text[i] != '}' {
				c := text[i]
				switch {
				case c == '"' || c == '{':
					return nil, errors.New("malformed array literal")
				case c == '\\':
					i++
					if i >= len(text) {
						return nil, errors.New("malformed array literal")
					}
					elem = append(elem, text[i])
					escaped = true
					keep = len(elem)
				default:
					elem = append(elem, c)
					if !isSpace(c) {
						keep = len(elem)
					}
				}
				i++
			}
			elem = elem[:keep]
			if len(elem) == 0 {
				return nil, errors.New("malformed array literal: empty unquoted element")
			}
			if !escaped && isNULL(elem) {
				elem = nil
			}
		}
		elems = append(elems, elem)
		if i >= len(text) {
			return nil, errors.New("malformed array literal")
		}
		switch text[i] {
		case delim:
			i++
		case '}':
			if skipSpace(text, i+1) != len(text) {
				return nil, errors.New("malformed array literal: text after closing brace")
			}
			return elems, nil
		default:
			return nil, errors.New("malformed array literal")
		}
	}
}

func isNULL(b []byte) bool {
	return len(b) == 4 &&
		(b[0]|0x20) == 'n' && (b[1]|0x20) == 'u' && (b[2]|0x20) == 'l' && (b[3]|0x20) == 'l'
}

// isSpace is array_in's notion of white space (scanner_isspace).
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func skipSpace(text []byte, i int) int {
	for i < len(text) && isSpace(text[i]) {
		i++
	}
	return i
}
