package config

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// connHint is appended to connection string errors.
const connHint = "expected postgres://user:password@host:port/database or a key=value string like \"host=h port=5432 dbname=db user=u\""

// conninfo is what tidemark needs to know about a PostgreSQL connection
// string: the database name (for defaulting the source name). The driver
// parses the string again for real.
type conninfo struct {
	database string
}

// parseConninfo checks that s is a postgres:// URL or a libpq key=value
// string. Its errors never contain s; they show RedactURL(s) at most.
func parseConninfo(s string, allowDSN bool) (conninfo, error) {
	if allowDSN && isMySQLURL(s) {
		c, err := ParseMySQLURL(s)
		return conninfo{database: c.Database}, err
	}
	if hasURLScheme(s) || strings.Contains(s, "://") {
		return parsePostgresURL(s)
	}
	if allowDSN && strings.Contains(s, "=") {
		kv, err := parseDSN(s)
		if err != nil {
			return conninfo{}, fmt.Errorf("not a valid key=value connection string: %v", err)
		}
		if p, ok := kv["port"]; ok && !validPorts(p) {
			return conninfo{}, errors.New("not a valid key=value connection string: port must be between 1 and 65535 (a list of them for several hosts)")
		}
		return conninfo{database: kv["dbname"]}, nil
	}
	if !allowDSN && looksLikeDSN(s) {
		return conninfo{}, errors.New("key=value connection strings are not accepted here (value not shown); use a URL: postgres://user:password@host:port/database")
	}
	if strings.HasPrefix(strings.ToLower(s), "postgres:") || strings.HasPrefix(strings.ToLower(s), "postgresql:") {
		return conninfo{}, errors.New("not a valid PostgreSQL URL: \"//\" missing after the scheme; " + connHint)
	}
	// s might be a bare password: say nothing about its content.
	if allowDSN {
		return conninfo{}, errors.New("not a PostgreSQL URL or key=value connection string (value not shown); " + connHint)
	}
	return conninfo{}, errors.New("not a PostgreSQL URL (value not shown); expected postgres://user:password@host:port/database")
}

func parsePostgresURL(s string) (conninfo, error) {
	shown := RedactURL(s)
	bad := func(why string) error {
		return fmt.Errorf("not a valid PostgreSQL URL (%s): %s; expected postgres://user:password@host:port/database", shown, why)
	}
	scheme := strings.ToLower(s[:max(strings.Index(s, "://"), 0)])
	if scheme != "postgres" && scheme != "postgresql" {
		if !isScheme(scheme) {
			return conninfo{}, bad("malformed scheme")
		}
		return conninfo{}, bad(fmt.Sprintf("scheme %q is not supported", scheme))
	}
	u, err := url.Parse(s)
	if err != nil {
		// net/url's messages quote the input; map them to our own words.
		msg := err.Error()
		switch {
		case strings.Contains(msg, "invalid userinfo"):
			return conninfo{}, bad("the user or password contains characters that must be percent-encoded (space as %20, '/' as %2F, '#' as %23, '?' as %3F)")
		case strings.Contains(msg, "invalid URL escape"):
			return conninfo{}, bad("invalid percent-escape: '%' must be followed by two hex digits (write a literal '%' as %25)")
		case strings.Contains(msg, "invalid port"):
			return conninfo{}, bad("invalid port (if the password contains ':', '/', '?' or '#', percent-encode it)")
		case strings.Contains(msg, "missing ']'"):
			return conninfo{}, bad("IPv6 host is missing its closing ']'")
		case strings.Contains(msg, "invalid character"), strings.Contains(msg, "control character"):
			return conninfo{}, bad("contains characters that are not allowed in a URL")
		default:
			return conninfo{}, bad("malformed URL")
		}
	}
	q := u.Query()
	host := u.Host
	if host == "" && q.Get("host") == "" {
		return conninfo{}, bad("missing host")
	}
	if strings.Contains(u.Path, "@") {
		// "postgres://u:p/w@h/db" parses as host "u", port "p", path
		// "/w@h/db": a password with an unescaped '/'.
		return conninfo{}, bad("'@' after the host: percent-encode '/', '?' and '#' in the password (as %2F, %3F, %23)")
	}
	if host != "" && !strings.Contains(host, ",") {
		if p := u.Port(); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return conninfo{}, bad("port must be between 1 and 65535")
			}
		}
		if u.Hostname() == "" {
			return conninfo{}, bad("missing host")
		}
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" {
		db = q.Get("dbname")
	}
	return conninfo{database: db}, nil
}

// validPorts reports whether p is a port, or a comma-separated list of
// ports (one per host), each 1..65535.
func validPorts(p string) bool {
	for _, one := range strings.Split(p, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(one))
		if err != nil || n < 1 || n > 65535 {
			return false
		}
	}
	return true
}

// parseDSN parses a libpq key=value connection string: keys are words,
// values are bare (with backslash escapes) or single-quoted. Its errors
// never quote the input.
func parseDSN(s string) (map[string]string, error) {
	kv := map[string]string{}
	i, n := 0, len(s)
	skip := func() {
		for i < n && isSpace(s[i]) {
			i++
		}
	}
	for pair := 1; ; pair++ {
		skip()
		if i >= n {
			break
		}
		k := i
		for i < n && (s[i] == '_' || s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' || s[i] >= '0' && s[i] <= '9') {
			i++
		}
		key := s[k:i]
		if key == "" {
			return nil, fmt.Errorf("item %d: expected a key name", pair)
		}
		skip()
		if i >= n || s[i] != '=' {
			return nil, fmt.Errorf("item %d: missing '=' after the key", pair)
		}
		i++
		skip()
		var v strings.Builder
		if i < n && s[i] == '\'' {
			i++
			closed := false
			for i < n {
				c := s[i]
				i++
				if c == '\\' && i < n {
					v.WriteByte(s[i])
					i++
					continue
				}
				if c == '\'' {
					closed = true
					break
				}
				v.WriteByte(c)
			}
			if !closed {
				return nil, fmt.Errorf("item %d: unterminated quoted value", pair)
			}
		} else {
			for i < n && !isSpace(s[i]) {
				if s[i] == '\\' && i+1 < n {
					i++
				}
				v.WriteByte(s[i])
				i++
			}
		}
		kv[key] = v.String() // libpq: the last one wins

	}
	if len(kv) == 0 {
		return nil, errors.New("empty connection string")
	}
	return kv, nil
}

// SourceDatabase returns the database name in Source: the URL path, the
// dbname= query parameter, or the dbname key of a key=value string.
func (c *Config) SourceDatabase() (string, error) {
	if c.Source.IsZero() {
		return "", errors.New("source is not set")
	}
	ci, err := parseConninfo(c.Source.Reveal(), true)
	if err != nil {
		return "", err
	}
	if ci.database == "" {
		return "", errors.New("source names no database")
	}
	return ci.database, nil
}
