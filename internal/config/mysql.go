package config

import (
	"fmt"
	"hash/fnv"
	"net/url"
	"strconv"
	"strings"
)

// MySQL configures a mysql:// (or mariadb://) source.
type MySQL struct {
	// ServerID is the server_id tidemark's binlog reader registers with as
	// a replica; it must differ from the server's own and from every other
	// replica's: a number 1..4294967295. Empty: derived from the source
	// name (ServerIDOf).
	ServerID string `yaml:"server_id"`
	// Flavor is "mysql" or "mariadb"; empty detects it from VERSION().
	Flavor string `yaml:"flavor"`
}

// Source types.
const (
	SourcePostgres = "postgres"
	SourceMySQL    = "mysql"
)

// SourceType is the kind of source cfg.Source names, by its URL scheme:
// mysql:// and mariadb:// are SourceMySQL, anything else SourcePostgres.
func (c *Config) SourceType() string {
	if isMySQLURL(c.Source.Reveal()) {
		return SourceMySQL
	}
	return SourcePostgres
}

func isMySQLURL(s string) bool {
	l := strings.ToLower(strings.TrimSpace(s))
	return strings.HasPrefix(l, "mysql://") || strings.HasPrefix(l, "mariadb://")
}

// MySQLConn is a parsed mysql:// source URL.
type MySQLConn struct {
	Host     string
	Port     int
	User     string
	Password string
	Database string
}

// ParseMySQLURL parses mysql://user:password@host:port/database (also
// mariadb://). Its errors never show the password.
func ParseMySQLURL(s string) (MySQLConn, error) {
	shown := RedactURL(s)
	bad := func(why string) error {
		return fmt.Errorf("not a valid MySQL URL (%s): %s; expected mysql://user:password@host:port/database", shown, why)
	}
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return MySQLConn{}, bad("malformed URL (percent-encode '/', '?', '#', '@' and ':' in the password)")
	}
	if sch := strings.ToLower(u.Scheme); sch != "mysql" && sch != "mariadb" {
		return MySQLConn{}, bad(fmt.Sprintf("scheme %q is not mysql or mariadb", u.Scheme))
	}
	c := MySQLConn{Host: u.Hostname(), Port: 3306, Database: strings.TrimPrefix(u.Path, "/")}
	if c.Host == "" {
		return MySQLConn{}, bad("missing host")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return MySQLConn{}, bad("port must be between 1 and 65535")
		}
		c.Port = n
	}
	if c.Database == "" || strings.Contains(c.Database, "/") {
		return MySQLConn{}, bad("name exactly one database in the path (/shop)")
	}
	if u.User != nil {
		c.User = u.User.Username()
		c.Password, _ = u.User.Password()
	}
	if c.User == "" {
		return MySQLConn{}, bad("missing user")
	}
	return c, nil
}

// DefaultServerID is the server_id of a pipeline without mysql.server_id:
// a hash of its name, so two pipelines on one server differ, and the same
// pipeline keeps its id across restarts.
func DefaultServerID(name string) int {
	h := fnv.New32a()
	h.Write([]byte("tidemark:" + name))
	return 1000 + int(h.Sum32()%(1<<31-1001))
}

// validateMySQL checks the mysql: block.
func (c *Config) validateMySQL(k *checker) {
	switch c.MySQL.Flavor {
	case "", "mysql", "mariadb":
	default:
		k.bad("mysql.flavor", "must be mysql or mariadb (or empty to detect it), got %s", showValue(c.MySQL.Flavor))
	}
	if c.MySQL.ServerID != "" {
		if n, err := strconv.ParseUint(strings.TrimSpace(c.MySQL.ServerID), 10, 32); err != nil || n == 0 {
			k.bad("mysql.server_id", "must be a number between 1 and 4294967295, got %s", showValue(c.MySQL.ServerID))
		}
	}
}

// ServerIDOf is the server_id of the pipeline: mysql.server_id, or
// DefaultServerID of its name. Call after Validate.
func (c *Config) ServerIDOf() uint32 {
	if n, err := strconv.ParseUint(strings.TrimSpace(c.MySQL.ServerID), 10, 32); err == nil && n > 0 {
		return uint32(n)
	}
	return uint32(DefaultServerID(c.Name))
}
