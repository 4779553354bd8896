package postgres

import (
	"context"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/decimal128"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/testenv"
)

func TestArrayElement(t *testing.T) {
	for in, want := range map[string]string{
		`{x}`:                        `x`,
		`{"a b"}`:                    `a b`,
		`{"q\"u\\o"}`:                `q"u\o`,
		`{"{a,\"b c\"}"}`:            `{a,"b c"}`,
		`{(1,1),(0,0)}`:              `(1,1),(0,0)`,
		`{"2024-01-01 00:00:00+00"}`: `2024-01-01 00:00:00+00`,
	} {
		got, null, err := arrayElement(in)
		if err != nil || null || got != want {
			t.Errorf("arrayElement(%s) = %q, %v, %v; want %q", in, got, null, err, want)
		}
	}
	if _, null, err := arrayElement(`{NULL}`); err != nil || !null {
		t.Errorf("arrayElement({NULL}) = null %v, %v", null, err)
	}
	if _, _, err := arrayElement(`x`); err == nil {
		t.Error("arrayElement(x): no error")
	}
}

// The missing values PostgreSQL keeps for columns added with a constant
// default decode to the lake values the rows read.
func TestMissingValues(t *testing.T) {
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "missing")
	pg.Exec(t, url, `CREATE TABLE m (id int PRIMARY KEY);
		INSERT INTO m VALUES (1);
		ALTER TABLE m ADD COLUMN s text DEFAULT 'it''s "x"',
			ADD COLUMN n int NOT NULL DEFAULT 7,
			ADD COLUMN d numeric(12,2) DEFAULT 12.5,
			ADD COLUMN ts timestamptz DEFAULT '2024-01-01 01:02:03.123456+02',
			ADD COLUMN tags text[] DEFAULT '{a,"b c"}',
			ADD COLUMN none text,
			ADD COLUMN at timestamptz DEFAULT now();
		CREATE TABLE v (id int PRIMARY KEY);
		INSERT INTO v VALUES (1);
		ALTER TABLE v ADD COLUMN vol float8 DEFAULT random();`)
	ctx := context.Background()
	d, err := NewDialer(url, func(s string) string { return s })
	if err != nil {
		t.Fatal(err)
	}
	conn, err := d.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tc := NewTypeCache(d)
	defer tc.Close()
	id := change.TableID{Schema: "public", Name: "m"}
	info, err := describeTable(ctx, conn, id, tc.Lookup)
	if err != nil {
		t.Fatal(err)
	}
	texts, err := missingValues(ctx, conn, id)
	if err != nil {
		t.Fatal(err)
	}
	s := schemaOf(info.Relation)
	if err := withMissing(id, s, info.Relation, texts); err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for _, f := range s.Fields {
		got[f.Name] = f.Missing
	}
	want := map[string]any{
		"id": nil, "none": nil,
		"s":    `it's "x"`,
		"n":    int32(7),
		"d":    decimal128.FromI64(1250),
		"ts":   arrow.Timestamp(1704063723123456),
		"tags": []any{"a", "b c"},
	}
	for name, w := range want {
		g := got[name]
		if ga, ok := g.([]any); ok {
			wa, _ := w.([]any)
			if len(ga) != len(wa) || ga[0] != wa[0] || ga[1] != wa[1] {
				t.Errorf("column %s: missing value %#v, want %#v", name, g, w)
			}
			continue
		}
		if g != w {
			t.Errorf("column %s: missing value %#v, want %#v", name, g, w)
		}
	}
	if a, ok := got["at"].(arrow.Timestamp); !ok || a == 0 {
		t.Errorf("column at (DEFAULT now(), evaluated once by the ALTER): missing value %#v, want its timestamp", got["at"])
	}
	// A volatile default rewrites the table (every value is written into
	// the rows, with no change event): no missing value.
	texts, err = missingValues(ctx, conn, change.TableID{Schema: "public", Name: "v"})
	if err != nil || len(texts) != 0 {
		t.Errorf("table v (volatile default): missing values %v, %v; want none", texts, err)
	}
}
