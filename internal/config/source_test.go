package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/config"
)

// TestSourceWays checks every way to give the source, their precedence and
// their conflicts.
func TestSourceWays(t *testing.T) {
	const pw = "s3cr3t-canary"
	dir := t.TempDir()
	srcFile := filepath.Join(dir, "source")
	if err := os.WriteFile(srcFile, []byte("postgres://app:"+pw+"@filehost/shop\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	twoLines := filepath.Join(dir, "two")
	if err := os.WriteFile(twoLines, []byte("postgres://a@h/db\npostgres://b:"+pw+"@h/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withSource := writeFile(t, "source: postgres://app@confighost/shop\n")
	withFile := writeFile(t, "source_file: "+srcFile+"\n")
	withBoth := writeFile(t, "source: postgres://app@confighost/shop\nsource_file: "+srcFile+"\n")

	tests := []struct {
		name     string
		env      string // TIDEMARK_SOURCE; "" unset
		config   string
		args     []string
		wantHost string // in the source; "" for an error
		wantErr  string
		warn     bool
	}{
		{name: "flag", args: []string{"--source", "postgres://app:" + pw + "@flaghost/shop"}, wantHost: "flaghost", warn: true},
		{name: "flag without password", args: []string{"--source", "postgres://app@flaghost/shop"}, wantHost: "flaghost"},
		{name: "flag DSN with password", args: []string{"--source", "host=flaghost dbname=shop password=" + pw}, wantHost: "flaghost", warn: true},
		{name: "source file flag", args: []string{"--source-file", srcFile}, wantHost: "filehost"},
		{name: "source file key", config: withFile, wantHost: "filehost"},
		{name: "env", env: "postgres://app:" + pw + "@envhost/shop", wantHost: "envhost"},
		{name: "config wins over env", env: "postgres://app@envhost/shop", config: withSource, wantHost: "confighost"},
		{name: "flag wins over config", config: withSource, args: []string{"--source-file", srcFile}, wantHost: "filehost"},
		{name: "source flag wins over source_file key", config: withFile, args: []string{"--source", "postgres://app@flaghost/shop"}, wantHost: "flaghost"},
		{name: "both flags", args: []string{"--source", "postgres://app@flaghost/shop", "--source-file", srcFile}, wantErr: "--source and --source-file are both given"},
		{name: "both keys", config: withBoth, wantErr: "source_file: source and source_file are both set"},
		{name: "unreadable file", args: []string{"--source-file", filepath.Join(dir, "missing")}, wantErr: "source_file: cannot read the source file " + filepath.Join(dir, "missing") + ": no such file or directory (set by --source-file)"},
		{name: "empty file", args: []string{"--source-file", empty}, wantErr: "is empty"},
		{name: "two lines", args: []string{"--source-file", twoLines}, wantErr: "more than one line"},
		{name: "nothing", wantErr: "source: required"},
		{name: "bad env value", env: "postgres://app:" + pw + "@[::1/shop", wantErr: "(set by TIDEMARK_SOURCE)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv(config.SourceEnv, tc.env)
			} else {
				os.Unsetenv(config.SourceEnv) // TestMain cleared it for the whole process
			}
			cfg, err := config.Resolve(newFlags(t, tc.args...), tc.config)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("no error, want one containing %q", tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %q, want it to contain %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), pw) {
					t.Errorf("the error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(cfg.Source.Reveal(), tc.wantHost) {
				t.Errorf("source %s, want host %s", cfg.Source, tc.wantHost)
			}
			if got := cfg.PasswordOnCommandLine(); got != tc.warn {
				t.Errorf("PasswordOnCommandLine() = %v, want %v", got, tc.warn)
			}
			if w := config.PasswordWarning("--source", cfg.Source.Reveal()); strings.Contains(w, pw) || !strings.Contains(w, config.SourceEnv) || !strings.Contains(w, "PGPASSWORD") {
				t.Errorf("warning %q", w)
			}
			// A MySQL source is told the ways it takes, not libpq's.
			if w := config.PasswordWarning("--source", "mysql://app:"+pw+"@db/shop"); strings.Contains(w, pw) || !strings.Contains(w, config.SourceEnv) || strings.Contains(w, "PGPASSWORD") {
				t.Errorf("MySQL warning %q", w)
			}
		})
	}
}

func TestMain(m *testing.M) {
	// The tests decide TIDEMARK_SOURCE themselves.
	os.Unsetenv(config.SourceEnv)
	os.Exit(m.Run())
}
