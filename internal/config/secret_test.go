package config_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/tidemark/tidemark/internal/config"
)

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://u:secret@h:5432/db", "postgres://u:xxxxx@h:5432/db"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://h/db", "postgres://h/db"},
		{"postgres://u:p@ss@host/db", "postgres://u:xxxxx@host/db"},
		{"postgres://u:pa ss@[::1/db", "postgres://u:xxxxx@[::1/db"},
		{"postgres://u:%zz@h", "postgres://u:xxxxx@h"},
		{"postgres://u:a/b?c#d@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://:secret@h/db", "postgres://:xxxxx@h/db"},
		{"postgres://we!rd@us:er@h/db", "postgres://xxxxx@h/db"}, // odd user: redact all
		{"host=h password=secret user=u", "host=h password=xxxxx user=u"},
		{"host=h password = secret user=u", "host=h password = xxxxx user=u"},
		{"password='se cret' host=h", "password=xxxxx host=h"},
		{`password='it\'s' host=h`, "password=xxxxx host=h"},
		{"password=se cret host=h", "password=xxxxx host=h"}, // malformed: swallow the stray word
		{"host=h sslpassword=k PASSWORD=s", "host=h sslpassword=xxxxx PASSWORD=xxxxx"},
		{"postgres://h/db?sslmode=require&password=s@cret&application_name=x", "postgres://h/db?sslmode=require&password=xxxxx&application_name=x"},
		{
			"failed to connect to postgres://u:secret@h/db: dial tcp: connection refused",
			"failed to connect to postgres://u:xxxxx@h/db: dial tcp: connection refused",
		},
		{
			"cannot parse `postgres://u:p@ss w@h/db`: failed to parse as URL (parse \"postgres://u:p@ss w@h/db\": net/url: invalid userinfo)",
			"cannot parse `postgres://u:xxxxx@h/db`: failed to parse as URL (parse \"postgres://u:xxxxx@h/db\": net/url: invalid userinfo)",
		},
		{"two: postgres://a:x@h1/db and mysql://b:y@h2/db", "two: postgres://a:xxxxx@h1/db and mysql://b:xxxxx@h2/db"},
		{"line1 postgres://a:x@h1\nline2 admin@example.com", "line1 postgres://a:xxxxx@h1\nline2 admin@example.com"},
		{"no secrets here", "no secrets here"},
	}
	for _, tt := range tests {
		if got := config.RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
}

// canaryInputs are connection strings, many malformed, that carry the
// canary password.
var canaryInputs = []string{
	"postgres://u:" + canary + "@host:5432/db",
	"postgres://u:" + canary + "@[::1/db",
	"postgres://u:%zz" + canary + "@h/db",
	"postgres://u:" + canary + "%zz@h/db",
	"postgres://u:" + canary + " x@h:notaport/db",
	"postgres://u:" + canary + "@h:99999/db",
	"postgres://u:12/" + canary + "@h/db",
	"postgres://u:a://" + canary + "@h/db",
	"postgres://u:" + canary,
	"postgres://u:" + canary + "@",
	"postgresql://" + canary + "@h/db",
	"postgres:///db?password=" + canary,
	"postgres://h/db?sslmode=disable&password=" + canary + "&x=1",
	"postgres:u:" + canary + "@h/db",
	"mysql://u:" + canary + "@h/db",
	"host=h password=" + canary + " user=u dbname=d",
	"host=h password='" + canary + " x' dbname=d",
	"host=h password='" + canary,
	"host=h password=" + canary + " stray dbname=d",
	"host=h password = " + canary,
	canary,
	"u:" + canary + "@h/db",
	"  " + canary + "  ",
}

// sayNoCanary fails if s contains the canary password.
func sayNoCanary(t *testing.T, where, in, s string) {
	t.Helper()
	if strings.Contains(s, canary) {
		t.Errorf("%s shows the password for input %q:\n%s", where, in, s)
	}
}

func TestCanaryNeverShown(t *testing.T) {
	for _, in := range canaryInputs {
		sec := config.NewSecret(in)
		cfg := &config.Config{Source: sec, Catalog: sec}
		verr := cfg.Validate() // may or may not fail; defaults are filled either way

		if verr != nil {
			sayNoCanary(t, "Validate error", in, verr.Error())
		}
		if _, err := cfg.SourceDatabase(); err != nil {
			sayNoCanary(t, "SourceDatabase error", in, err.Error())
		}
		if strings.Contains(in, "://") || strings.Contains(in, "password") {
			sayNoCanary(t, "RedactURL", in, config.RedactURL(in))
		}
		sayNoCanary(t, "Secret.String", in, sec.String())
		sayNoCanary(t, "Secret.GoString", in, sec.GoString())
		sayNoCanary(t, "fmt of Secret", in, fmt.Sprintf("%v %+v %#v %s %q %x %d %10.3v", sec, sec, sec, sec, sec, sec, sec, sec))
		sayNoCanary(t, "fmt of *Secret", in, fmt.Sprintf("%v %+v %#v", &sec, &sec, &sec))
		sayNoCanary(t, "fmt of Config", in, fmt.Sprintf("%v %+v %#v %s %d", cfg, cfg, cfg, cfg, cfg))
		sayNoCanary(t, "fmt of *Config", in, fmt.Sprintf("%v %+v %#v %s", *cfg, *cfg, *cfg, *cfg))
		sayNoCanary(t, "fmt of []Secret", in, fmt.Sprintf("%v %#v", cfg.Secrets(), cfg.Secrets()))
		sayNoCanary(t, "Config.String", in, cfg.String())

		for _, h := range []func(io.Writer) slog.Handler{
			func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) },
			func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) },
		} {
			var buf bytes.Buffer
			log := slog.New(h(&buf))
			log.Info("config", "cfg", cfg, "value", *cfg, "source", cfg.Source, "ptr", &sec, slog.Any("catalog", cfg.Catalog))
			log.With("cfg", cfg).Info("again")
			sayNoCanary(t, "slog", in, buf.String())
		}

		y, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		sayNoCanary(t, "yaml.Marshal", in, string(y))
		j, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		sayNoCanary(t, "json.Marshal", in, string(j))

		// An error from a driver that echoes the connection string.
		driverErr := fmt.Errorf("cannot parse `%s`: failed (parse %q): %w", in, in, io.ErrUnexpectedEOF)
		red := config.RedactError(driverErr, cfg.Secrets()...)
		sayNoCanary(t, "RedactError", in, red.Error())
		sayNoCanary(t, "fmt of RedactError", in, fmt.Sprintf("%v %s", red, red))
		if !errors.Is(red, io.ErrUnexpectedEOF) {
			t.Errorf("RedactError broke errors.Is for %q", in)
		}

		// Through a config file and a flag.
		p := filepath.Join(t.TempDir(), "c.yaml")
		body := "source: " + strconv.Quote(in) + "\ncatalog: " + strconv.Quote(in) + "\n"
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadAndValidate(p); err != nil {
			sayNoCanary(t, "Load+Validate error", in, err.Error())
		}
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		var fc config.Config
		fc.BindFlags(fs)
		if err := fs.Parse([]string{"--source", in, "--catalog=" + in}); err != nil {
			sayNoCanary(t, "flag parse error", in, err.Error())
		}
		sayNoCanary(t, "flag usage", in, fs.FlagUsages())
		sayNoCanary(t, "flag value", in, fs.Lookup("source").Value.String())
		if _, err := config.Resolve(fs, ""); err != nil {
			sayNoCanary(t, "Resolve error", in, err.Error())
		}
	}
}

// The same for a password reaching the config through an environment
// variable: it must not show in errors about the line it is on.
func TestCanaryFromEnvironment(t *testing.T) {
	t.Setenv("TM_TEST_PG", "postgres://u:"+canary+"@[::1/db")
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("source: ${TM_TEST_PG}\ncommit_interval: ${TM_TEST_PG}\nname: ${TM_TEST_NOPE:-"+canary+"}\nwarehouse: ${TM_TEST_NOPE}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadAndValidate(p)
	if err == nil {
		t.Fatal("no error")
	}
	sayNoCanary(t, "error", "env", err.Error())
	if !strings.Contains(err.Error(), "c.yaml:4: environment variable TM_TEST_NOPE is not set") {
		t.Errorf("error does not name the variable and line:\n%v", err)
	}
}

func TestSecret(t *testing.T) {
	s := config.NewSecret("postgres://u:pw@h/db")
	eq(t, "Reveal", s.Reveal(), "postgres://u:pw@h/db")
	eq(t, "String", s.String(), "postgres://u:xxxxx@h/db")
	eq(t, "%#v", fmt.Sprintf("%#v", s), `config.NewSecret("postgres://u:xxxxx@h/db")`)
	eq(t, "IsZero", s.IsZero(), false)
	eq(t, "zero IsZero", config.Secret{}.IsZero(), true)
	eq(t, "bare password", config.NewSecret("hunter2").String(), "xxxxx")
	eq(t, "DSN without password", config.NewSecret("host=h dbname=d").String(), "host=h dbname=d")

	var back struct {
		S config.Secret `yaml:"s"`
	}
	if err := yaml.Unmarshal([]byte("s: postgres://u:pw@h/db\n"), &back); err != nil {
		t.Fatal(err)
	}
	eq(t, "UnmarshalYAML", back.S.Reveal(), "postgres://u:pw@h/db")
	out, _ := yaml.Marshal(back)
	eq(t, "MarshalYAML", string(out), "s: postgres://u:xxxxx@h/db\n")

	var fs pflag.FlagSet
	fs.Var(&back.S, "source", "")
	if err := fs.Parse([]string{"--source", "host=h password=pw"}); err != nil {
		t.Fatal(err)
	}
	eq(t, "Set", back.S.Reveal(), "host=h password=pw")
}

func TestRedactErrorNil(t *testing.T) {
	if config.RedactError(nil) != nil {
		t.Fatal("RedactError(nil) != nil")
	}
}

func TestRedactErrorReplacesDecodedPassword(t *testing.T) {
	sec := config.NewSecret("postgres://u:p%40ss%20word@h/db")
	err := config.RedactError(errors.New(`server said: password "p@ss word" rejected`), sec)
	if strings.Contains(err.Error(), "p@ss word") {
		t.Fatalf("decoded password shown: %v", err)
	}
	var target *config.Error
	wrapped := config.RedactError(fmt.Errorf("x: %w", &config.Error{Path: "source", Msg: "m"}), sec)
	if !errors.As(wrapped, &target) || target.Path != "source" {
		t.Fatal("errors.As does not see through RedactError")
	}
}
