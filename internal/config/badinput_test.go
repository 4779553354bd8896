package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/config"
)

// TestMalformedSourcesRejected: a malformed connection string is refused
// by Validate, at the YAML path source (or catalog), with a reason, and
// without the password, however it is malformed.
func TestMalformedSourcesRejected(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://user:" + canary + "@host:badport/db", "invalid port"},
		{"postgres://user:" + canary + "@host:99999/db", "port"},
		{"postgres://user:" + canary + "@host:-1/db", "port"},
		{"user:" + canary + "@host/db", ""},                   // missing scheme
		{"//user:" + canary + "@host/db", ""},                 // missing scheme
		{"host/db?password=" + canary, ""},                    // neither URL nor key=value
		{"postgres://user:" + canary + "%zz@host/db", "%"},    // bad escape in the password
		{"postgres://user:%zz" + canary + "@host/db", "%"},    // bad escape first
		{"postgres://us%zzer:" + canary + "@host/db", "%"},    // bad escape in the user
		{"postgres://user:" + canary + "@host/d%zzb", "%"},    // bad escape in the database
		{"postgres://user:" + canary + "@[::1/db", "IPv6"},    // unclosed IPv6 bracket
		{"postgres://user:" + canary + "@ho st/db", ""},       // space in the host
		{"ftp://user:" + canary + "@host/db", "scheme"},       // wrong scheme
		{"mysql://user:" + canary + "@host:99999/db", "port"}, // a MySQL URL, checked as one
		{"mysql://user:" + canary + "@host/", "database"},     // a MySQL URL without a database
		{"postgres:user:" + canary + "@host/db", ""},          // scheme without //
		{"host=h password='" + canary, "quote"},               // unterminated quote
		{"host=h password=" + canary + " stray dbname=d", ""},
		{"host=h port=abc password=" + canary, "port"},
		{"  ", "required"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			cfg := &config.Config{Source: config.NewSecret(tc.in), Name: "n"}
			err := cfg.Validate()
			if err == nil {
				t.Fatalf("Validate accepted %q", tc.in)
			}
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Path != "source" {
				t.Errorf("error is not at the path source: %v", err)
			}
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not say %q: %v", tc.want, err)
			}
			sayNoCanary(t, "Validate error", tc.in, err.Error())
			// The same string as a catalog URL.
			cat := &config.Config{Source: config.NewSecret("postgres://u@h/db"), Catalog: config.NewSecret(tc.in)}
			if err := cat.Validate(); strings.TrimSpace(tc.in) != "" {
				if err == nil || !errors.As(err, &ce) || ce.Path != "catalog" {
					t.Errorf("catalog %q: got %v, want an error at catalog", tc.in, err)
				} else {
					sayNoCanary(t, "catalog Validate error", tc.in, err.Error())
				}
			}
		})
	}
}

// TestTablesTheLakeCannotHold: a tables entry naming a schema or table the
// lake cannot store exactly is refused at its YAML path with the reason;
// quotes, spaces, unicode and reserved words are fine.
func TestTablesTheLakeCannotHold(t *testing.T) {
	for _, tc := range []struct{ entry, want string }{
		{`"Sales.EU"."Invoices"`, `tables[0]: "Sales.EU"."Invoices": the schema name "Sales.EU" contains '.'`},
		{`public."t.x"`, `the table name "t.x" contains '.'`},
		{`public."a/b"`, `contains '/'`},
		{"public.\"a\tb\"", "control character"},
		{`_building.t`, `the schema name "_building" is reserved`},
	} {
		cfg := &config.Config{Source: config.NewSecret("postgres://u@h/db"), Tables: []string{tc.entry}}
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tables: [%s]: got %v, want %q", tc.entry, err, tc.want)
		}
	}
	ok := []string{`"Mixed Case"."select"`, `"Ünïcødé 表"."user"`, `"sch""q"."ta""ble"`, `public."order"`, `public.ünïcødé`, `"_building2".t`}
	cfg := &config.Config{Source: config.NewSecret("postgres://u@h/db"), Tables: ok}
	if err := cfg.Validate(); err != nil {
		t.Errorf("tables %q: %v", ok, err)
	}
}
