package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
)

// The source URL's scheme picks the source; a scheme no source takes is a
// configuration error that names the scheme, never the URL (it may hold a
// password).
func TestSourceFor(t *testing.T) {
	for _, conn := range []string{
		"postgres://u:secret@h:5432/db", "postgresql://u@h/db", "POSTGRES://u@h/db", "host=h port=5432 dbname=db user=u",
	} {
		src, err := sourceFor(conn)
		if err != nil || src.name != "postgres" {
			t.Errorf("sourceFor(%q) = %v, %v; want postgres", conn, src, err)
		}
	}
	for _, conn := range []string{"oracle://u:secret@h/db", "just-a-word-secret"} {
		_, err := sourceFor(conn)
		if !errors.Is(err, fault.ErrBadConfig) {
			t.Errorf("sourceFor(%q) = %v, want bad_config", conn, err)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("sourceFor(%q): the error shows the connection string: %v", conn, err)
		}
	}
	if _, err := sourceFor("oracle://h/db"); err == nil || !strings.Contains(err.Error(), `"oracle"`) {
		t.Errorf("the error does not name the scheme: %v", err)
	}
}

// A checkpoint names the source that wrote it; one without the name (a
// lake written before it) is PostgreSQL's.
func TestSourceNamed(t *testing.T) {
	if got := sourceNamed("").name; got != "postgres" {
		t.Errorf(`sourceNamed("") = %s`, got)
	}
	if got := sourceNamed("postgres").formatPos(0x16_B374D848); got != "16/B374D848" {
		t.Errorf("postgres formats 0x16B374D848 as %q", got)
	}
}

// time_as is PostgreSQL's: a MySQL source, whose TIME always lands as long
// microseconds, refuses any other value than the default by name.
func TestMySQLRefusesTimeAs(t *testing.T) {
	for _, as := range []string{"", "time", "text", "micros"} {
		cfg := &config.Config{Source: config.NewSecret("mysql://u:secret@h:3306/shop"), TimeAs: as}
		_, err := mysqlOptions(cfg)
		switch as {
		case "", "time":
			if err != nil {
				t.Errorf("time_as %q: %v", as, err)
			}
		default:
			if !errors.Is(err, fault.ErrBadConfig) || !strings.Contains(err.Error(), "time_as: "+as) || !strings.Contains(err.Error(), "PostgreSQL sources only") {
				t.Errorf("time_as %q: %v; want bad_config naming time_as and PostgreSQL", as, err)
			}
		}
	}
}
