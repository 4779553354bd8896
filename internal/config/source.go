package config

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// SourceEnv is the environment variable that gives the whole source
// connection string when neither a flag nor the config file does.
const SourceEnv = "TIDEMARK_SOURCE"

// SafeSourceWays names the ways to give a PostgreSQL source without a
// password on the command line, for messages.
const SafeSourceWays = SourceEnv + ", --source-file (source_file:), PGPASSWORD or ~/.pgpass (PGPASSFILE), or ${VAR} in the config file"

// safeMySQLSourceWays is SafeSourceWays for a MySQL/MariaDB source (its
// driver reads no password from the environment or a file of its own).
const safeMySQLSourceWays = SourceEnv + ", --source-file (source_file:), or ${VAR} in the config file"

// ReadSourceFile reads a connection string from the file at path: its
// content with surrounding white space (a trailing newline) removed. Its
// errors name the file, never its content.
func ReadSourceFile(path string) (Secret, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is named below
		}
		return Secret{}, fmt.Errorf("cannot read the source file %s: %v", path, err)
	}
	s := strings.TrimSpace(string(data))
	if s == "" {
		return Secret{}, fmt.Errorf("the source file %s is empty; it must hold the connection string, e.g. postgres://user:password@host:port/database", path)
	}
	if strings.ContainsAny(s, "\r\n") {
		return Secret{}, fmt.Errorf("the source file %s holds more than one line (content not shown); it must hold the connection string alone", path)
	}
	return NewSecret(s), nil
}

// HasPassword reports whether the value carries a password (in a URL's
// user info or query, or a key=value string's password key). When unsure it
// answers yes.
func (s Secret) HasPassword() bool { return len(allSpans(s.raw)) > 0 }

// PasswordOnCommandLine reports whether the source was given by --source
// with a password in it: one that every user of the machine can read in the
// process list.
func (c *Config) PasswordOnCommandLine() bool {
	return c.set["source"].flag == "source" && c.Source.HasPassword()
}

// PasswordWarning is the warning for a password given on the command line
// in conn (a source connection string, for the ways its kind of source
// takes one instead); it never contains the password.
func PasswordWarning(flag, conn string) string {
	ways := SafeSourceWays
	if isMySQLURL(conn) {
		ways = safeMySQLSourceWays
	}
	return "the " + flag + " value carries a password, which every user of this machine can read in the process list (ps, /proc); " +
		"give it by " + ways + " instead (docs/configuration.md, Secrets)"
}

// settleSource applies the precedence of the ways to give the source,
// after the file and the flags (fs.Changed) are applied: a flag wins over
// the file, --source and --source-file together are an error, and
// SourceEnv (from lookup) is used when nothing else gives a source.
func (c *Config) settleSource(changed func(string) bool, lookup func(string) (string, bool)) error {
	switch {
	case changed("source") && changed("source-file"):
		return &Error{Path: "source", Msg: "--source and --source-file are both given; pass one"}
	case changed("source"):
		c.SourceFile = ""
	case changed("source-file"):
		c.Source = Secret{}
	}
	if c.Source.IsZero() && c.SourceFile == "" {
		if v, ok := lookup(SourceEnv); ok && strings.TrimSpace(v) != "" {
			c.Source = NewSecret(v)
			c.markSet("source", origin{env: SourceEnv})
		}
	}
	return nil
}

// readSourceFile fills Source from SourceFile (checked by validate).
func (c *Config) readSourceFile(k *checker) {
	if c.SourceFile == "" || c.sourceFromFile {
		return
	}
	if !c.Source.IsZero() {
		k.bad("source_file", "source and source_file are both set; keep one")
		return
	}
	s, err := ReadSourceFile(c.SourceFile)
	if err != nil {
		k.bad("source_file", "%v", err)
		return
	}
	c.Source, c.sourceFromFile = s, true
	if o, ok := c.set["source_file"]; ok {
		c.markSet("source", o)
	}
}
