package postgres_test

import (
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/source/postgres"
)

// TestDialerNeverEchoesPassword: connection strings that pass config
// validation but that pgx refuses to parse. pgx quotes the whole string,
// password included, in its parse errors (pgx #1271); NewDialer's error
// must be a configuration error without the password.
func TestDialerNeverEchoesPassword(t *testing.T) {
	const canary = "Canary-P@ss-7f3"
	enc := strings.ReplaceAll(canary, "@", "%40")
	for _, in := range []string{
		"postgres://u:" + enc + "@h/db?sslmode=bogus",
		"postgres://u:" + enc + "@h/db?connect_timeout=abc",
		"postgres://u:" + enc + "@h/db?target_session_attrs=nope",
		"postgres://u:" + enc + "@h:5432,h2:notaport/db",
		"postgres://u:" + enc + "@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
		"host=h password=" + canary + " sslmode=bogus dbname=d",
		"host=h password='" + canary + " x' connect_timeout=abc dbname=d",
	} {
		t.Run(in, func(t *testing.T) {
			cfg := &config.Config{Source: config.NewSecret(in), Name: "n"}
			if err := cfg.Validate(); err != nil {
				if strings.Contains(err.Error(), canary) || strings.Contains(err.Error(), enc) {
					t.Fatalf("Validate error shows the password: %v", err)
				}
				t.Logf("refused by Validate already: %v", err)
				return
			}
			_, err := postgres.NewDialer(in, config.RedactURL)
			if err == nil {
				t.Fatalf("NewDialer accepted %q", in)
			}
			if strings.Contains(err.Error(), canary) || strings.Contains(err.Error(), enc) {
				t.Errorf("NewDialer error shows the password: %v", err)
			}
			if fault.ExitCode(err) != fault.ExitConfig {
				t.Errorf("NewDialer error exits %d, want %d (configuration): %v", fault.ExitCode(err), fault.ExitConfig, err)
			}
		})
	}
}
