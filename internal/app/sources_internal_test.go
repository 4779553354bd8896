package app

import (
	"errors"
	"os"
	"path/filepath"
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

// time_as for MySQL: micros (the default) and text land a TIME as long
// microseconds or as its text; time cannot hold a MySQL TIME (negative,
// beyond 24 hours), so a config that gives it is refused by name, while
// the defaulted time_as means micros.
func TestMySQLTimeAs(t *testing.T) {
	for as, want := range map[string]string{"": "micros", "time": "micros", "micros": "micros", "text": "text"} {
		cfg := &config.Config{Source: config.NewSecret("mysql://u:secret@h:3306/shop"), TimeAs: as}
		opts, err := mysqlOptions(cfg)
		if err != nil || opts.TimeAs != want {
			t.Errorf("time_as %q (defaulted): %q, %v; want %q", as, opts.TimeAs, err, want)
		}
	}
	path := filepath.Join(t.TempDir(), "tidemark.yaml")
	if err := os.WriteFile(path, []byte("source: mysql://u:secret@h:3306/shop\nwarehouse: /lake\ntime_as: time\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = mysqlOptions(cfg)
	if !errors.Is(err, fault.ErrBadConfig) || !strings.Contains(err.Error(), "time_as: time cannot hold a MySQL/MariaDB TIME") || !strings.Contains(err.Error(), "use micros") {
		t.Errorf("time_as: time given: %v; want bad_config naming time_as and the options", err)
	}
}
