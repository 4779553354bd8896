package config

import (
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// redacted replaces a password wherever one is printed.
const redacted = "xxxxx"

// Secret holds a connection string (URL or key=value DSN) that may carry a
// password. Every way of printing it — String, GoString, fmt verbs, slog,
// YAML and JSON marshalling — shows the redacted form; only Reveal returns
// the raw value, and it should be passed straight to a driver.
//
// A Secret whose value does not look like a URL or DSN at all is printed as
// "xxxxx" in full: it may be a bare password.
type Secret struct {
	raw string
}

// NewSecret wraps s.
func NewSecret(s string) Secret { return Secret{raw: s} }

// Reveal returns the raw value, password included.
func (s Secret) Reveal() string { return s.raw }

// IsZero reports whether the secret is empty.
func (s Secret) IsZero() bool { return s.raw == "" }

// String returns the value with its password replaced by "xxxxx".
func (s Secret) String() string {
	if s.raw == "" {
		return ""
	}
	if hasURLScheme(s.raw) || looksLikeDSN(s.raw) {
		return RedactURL(s.raw)
	}
	return redacted
}

// GoString makes %#v print the redacted form, not the unexported field.
func (s Secret) GoString() string { return "config.NewSecret(" + strconv.Quote(s.String()) + ")" }

// Format prints the redacted form for every verb, so that no verb (%d, %x,
// %+v ...) falls through to printing the struct's field.
func (s Secret) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		fmt.Fprint(f, s.GoString())
	case verb == 'q':
		fmt.Fprint(f, strconv.Quote(s.String()))
	default:
		fmt.Fprint(f, s.String())
	}
}

// LogValue implements slog.LogValuer with the redacted form.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalYAML writes the redacted form: a dumped config never carries
// passwords (and therefore does not round-trip them).
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// MarshalJSON writes the redacted form, like MarshalYAML.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(s.String())), nil }

// UnmarshalYAML reads a scalar. Its errors never include the value.
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a string, got %s", kindName(n))
	}
	if n.Tag == "!!null" {
		*s = Secret{}
		return nil
	}
	*s = Secret{raw: n.Value}
	return nil
}

// Set implements pflag.Value.
func (s *Secret) Set(v string) error { s.raw = v; return nil }

// Type implements pflag.Value.
func (s *Secret) Type() string { return "url" }

// hasURLScheme reports whether s starts with "scheme://".
func hasURLScheme(s string) bool {
	i := strings.Index(s, "://")
	if i <= 0 {
		return false
	}
	return isScheme(s[:i])
}

func isScheme(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return true
}

// looksLikeDSN reports whether s parses as a libpq key=value string.
func looksLikeDSN(s string) bool {
	if strings.Contains(s, "://") || !strings.Contains(s, "=") {
		return false
	}
	_, err := parseDSN(s)
	return err == nil
}

// span is a byte range [start, end) of a string to replace.
type span struct{ start, end int }

// RedactURL returns s with every password it can find replaced by "xxxxx".
// s may be a URL, a key=value DSN, or any text that contains them (an error
// message, a log line); it need not be well formed. It redacts:
//
//   - in anything that looks like a URL ("://"), the user info up to the LAST
//     "@" on the same line (before the next URL): the password after the
//     first ":" when the user name is plain, otherwise the whole user info.
//     Passwords with unescaped "@", spaces or bad %-escapes are covered
//     because the search does not stop at them;
//   - every value of a "password=", "passwd=", "pwd=", "sslpassword=" ...
//     key (DSN or URL query), quoted or not. An unquoted DSN value runs on
//     over following words until the next "key=".
//
// When unsure, it redacts more than needed rather than less.
func RedactURL(s string) string {
	spans := allSpans(s)
	if len(spans) == 0 {
		return s
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	var b strings.Builder
	pos := 0
	for i := 0; i < len(spans); {
		sp := spans[i]
		// Merge overlapping and touching spans.
		for i++; i < len(spans) && spans[i].start <= sp.end; i++ {
			sp.end = max(sp.end, spans[i].end)
		}
		if sp.start < pos {
			sp.start = pos
		}
		if sp.end <= sp.start {
			continue
		}
		b.WriteString(s[pos:sp.start])
		b.WriteString(redacted)
		pos = sp.end
	}
	b.WriteString(s[pos:])
	return b.String()
}

// allSpans returns the ranges of s that RedactURL replaces.
func allSpans(s string) []span {
	kv, query := kvSpans(s)
	return append(urlSpans(s, query), kv...)
}

// urlSpans finds the password (or whole user info) of every "://" in s.
// An '@' inside a URL query's password value (skip) does not end the user
// info.
func urlSpans(s string, skip []span) []span {
	var out []span
	lastAt := func(from, to int) int {
		for i := to - 1; i >= from; i-- {
			if s[i] == '@' && !inSpans(i, skip) {
				return i - from
			}
		}
		return -1
	}
	for off := 0; ; {
		i := strings.Index(s[off:], "://")
		if i < 0 {
			return out
		}
		start := off + i + 3
		off = start
		end := urlScopeEnd(s, start)
		at := lastAt(start, end)
		if at < 0 {
			continue
		}
		userinfo := s[start : start+at]
		colon := strings.IndexByte(userinfo, ':')
		switch {
		case colon >= 0 && plainUser(userinfo[:colon]):
			out = append(out, span{start + colon + 1, start + at})
		case colon < 0 && plainUser(userinfo):
			// A user name alone: nothing secret.
		default:
			out = append(out, span{start, start + at})
		}
	}
}

// urlScopeEnd returns where the URL whose authority starts at start can end
// at the latest: the end of the line or the start of the next URL, where a
// next URL is a "scheme://" preceded by a space, quote or bracket (a "://"
// inside a password is preceded by other password characters).
func urlScopeEnd(s string, start int) int {
	end := len(s)
	if nl := strings.IndexAny(s[start:], "\r\n"); nl >= 0 {
		end = start + nl
	}
	for off := start; off < end; {
		i := strings.Index(s[off:end], "://")
		if i < 0 {
			break
		}
		j := off + i // index of "://"
		k := j
		for k > start && isSchemeByte(s[k-1]) {
			k--
		}
		if k < j && k > start && strings.IndexByte(" \t\"'`(<[{=,;", s[k-1]) >= 0 && isScheme(s[k:j]) {
			return k
		}
		off = j + 3
	}
	return end
}

func isSchemeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'
}

// plainUser reports whether u looks like an ordinary user name; anything
// stranger may be part of a password and gets redacted too.
func plainUser(u string) bool {
	for _, r := range u {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("._-~%+", r):
		default:
			return false
		}
	}
	return true
}

var passwordKey = regexp.MustCompile(`(?i)[a-z_]*(?:password|passwd|pass|pwd)\s*=\s*`)

var dsnKeyAhead = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\s*=`)

func inSpans(i int, spans []span) bool {
	for _, sp := range spans {
		if i >= sp.start && i < sp.end {
			return true
		}
	}
	return false
}

// kvSpans finds the value of every password-like key=value pair in s. The
// values in URL queries ("?password=" or "&password=") are also returned
// in query.
func kvSpans(s string) (out, query []span) {
	for _, m := range passwordKey.FindAllStringIndex(s, -1) {
		keyStart, v := m[0], m[1]
		isQuery := keyStart > 0 && (s[keyStart-1] == '?' || s[keyStart-1] == '&')
		end := v
		switch {
		case v < len(s) && (s[v] == '\'' || s[v] == '"'):
			q := s[v]
			end = len(s) // unterminated: redact to the end
			for i := v + 1; i < len(s); i++ {
				if s[i] == '\\' {
					i++
					continue
				}
				if s[i] == q {
					end = i + 1
					break
				}
			}
		case isQuery:
			// A URL query value ends at '&' or '#'; a space in it is
			// malformed, so keep going to the end of the line.
			end = v
			for end < len(s) && strings.IndexByte("&#\r\n", s[end]) < 0 {
				end++
			}
		default:
			// libpq value: up to unescaped white space. Words that follow and
			// are not "key=" may be the rest of a password with a space in
			// it, so they are swallowed as well.
			end = v
			for {
				for end < len(s) && !isSpace(s[end]) {
					if s[end] == '\\' {
						end++
					}
					end++
				}
				end = min(end, len(s))
				w := end
				for w < len(s) && (s[w] == ' ' || s[w] == '\t') {
					w++
				}
				if w >= len(s) || s[w] == '\n' || s[w] == '\r' || dsnKeyAhead.MatchString(s[w:]) {
					break
				}
				end = w
			}
		}
		if end > v {
			out = append(out, span{v, end})
			if isQuery {
				query = append(query, span{v, end})
			}
		}
	}
	return out, query
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// RedactError wraps err so that its message has every secret's raw value
// and password replaced, and any other URL or DSN password redacted by
// RedactURL. errors.Is and errors.As see err through Unwrap. It returns nil
// for a nil err.
func RedactError(err error, secrets ...Secret) error {
	if err == nil {
		return nil
	}
	var words []string
	for _, s := range secrets {
		words = append(words, s.secretParts()...)
	}
	// Longest first, so that a password does not break up a raw value.
	sort.Slice(words, func(i, j int) bool { return len(words[i]) > len(words[j]) })
	return &redactedError{err: err, words: words}
}

type redactedError struct {
	err   error
	words []string
}

func (e *redactedError) Error() string {
	msg := e.err.Error()
	for _, w := range e.words {
		msg = strings.ReplaceAll(msg, w, redacted)
	}
	return RedactURL(msg)
}

func (e *redactedError) Unwrap() error { return e.err }

// minSecretLen is the shortest password RedactError replaces wherever it
// occurs: replacing one- or two-letter strings would garble every message,
// and such a password protects nothing anyway.
const minSecretLen = 3

// secretParts returns the strings that must not appear in an error: the
// raw value, and every password found in it in raw, unquoted and
// percent-decoded form.
func (s Secret) secretParts() []string {
	if s.raw == "" {
		return nil
	}
	parts := []string{s.raw}
	add := func(p string) {
		if len(p) >= minSecretLen {
			parts = append(parts, p)
		}
	}
	for _, sp := range allSpans(s.raw) {
		p := s.raw[sp.start:sp.end]
		add(p)
		if dec, err := url.PathUnescape(p); err == nil {
			add(dec)
		}
		if len(p) >= 2 && (p[0] == '\'' || p[0] == '"') && p[len(p)-1] == p[0] {
			add(unescapeDSN(p[1 : len(p)-1]))
		}
		add(unescapeDSN(p))
	}
	if u, err := url.Parse(s.raw); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			add(pw)
		}
	}
	if kv, err := parseDSN(s.raw); err == nil {
		for k, v := range kv {
			if passwordKey.MatchString(k + "=") {
				add(v)
			}
		}
	}
	return parts
}

func unescapeDSN(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
