package config_test

import (
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/config"
)

func TestParseTableName(t *testing.T) {
	tests := []struct {
		in            string
		schema, table string
		str, quoted   string
		wantErr       string
	}{
		{in: "public.users", schema: "public", table: "users", str: "public.users", quoted: `"public"."users"`},
		{in: "Public.Users", schema: "public", table: "users", str: "public.users"}, // folded like PostgreSQL
		{in: ` "My.Schema"."T" `, schema: "My.Schema", table: "T", str: `"My.Schema"."T"`, quoted: `"My.Schema"."T"`},
		{in: `s."a""b"`, schema: "s", table: `a"b`, str: `s."a""b"`, quoted: `"s"."a""b"`},
		{in: "s.t$1", schema: "s", table: "t$1", str: "s.t$1"},
		{in: "s.1t", wantErr: "must start with a letter"},
		{in: "users", wantErr: `missing schema in "users" (did you mean "public.users"?)`},
		{in: "a.b.c", wantErr: "too many dots"},
		{in: "public.*", wantErr: "wildcards are not supported"},
		{in: `"".t`, wantErr: "empty quoted name"},
		{in: `"s.t`, wantErr: "unterminated double quote"},
		{in: "s.t x", wantErr: "unexpected text after the table name"},
		{in: "", wantErr: "empty table name"},
		{in: "s." + strings.Repeat("t", 64), wantErr: "longer than 63 bytes"},
	}
	for _, tt := range tests {
		got, err := config.ParseTableName(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseTableName(%q) = %v, %v; want error %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseTableName(%q): %v", tt.in, err)
			continue
		}
		eq(t, tt.in+" schema", got.Schema, tt.schema)
		eq(t, tt.in+" table", got.Table, tt.table)
		eq(t, tt.in+" String", got.String(), tt.str)
		if tt.quoted != "" {
			eq(t, tt.in+" Quoted", got.Quoted(), tt.quoted)
		}
		back, err := config.ParseTableName(got.String())
		if err != nil || back != got {
			t.Errorf("%q: String %q does not parse back: %v %v", tt.in, got.String(), back, err)
		}
	}
}
