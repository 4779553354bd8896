package iceberg_test

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// TestPostgresCatalog runs the create/append/reload cycle against a catalog
// kept in PostgreSQL (skipped when no PostgreSQL server binaries are found).
func TestPostgresCatalog(t *testing.T) {
	pg := testenv.Shared(t)
	ctx := context.Background()
	uri := pg.CreateDB(t, "iceberg_catalog")
	wh := t.TempDir()
	cfg := iceberg.Config{Warehouse: wh, CatalogURI: uri}

	cat, err := iceberg.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	tbl := createAllTypes(t, cat, ordersIdent)
	rec := buildAllTypes(t, tbl.ArrowSchema(), allTypesRows())
	defer rec.Release()
	if err := tbl.Append(ctx, []arrow.RecordBatch{rec}, map[string]string{"tidemark.position": "42"}); err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := cat.Close(); err != nil {
		t.Fatal(err)
	}

	cat2, err := iceberg.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer cat2.Close()
	re, err := cat2.LoadTable(ctx, ordersIdent)
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	if got := re.Summary()["tidemark.position"]; got != "42" {
		t.Errorf("tidemark.position = %q, want 42", got)
	}
	diffRows(t, scanRows(t, ctx, re), jsonRows(t, []arrow.RecordBatch{rec}))
	nss, err := cat2.ListNamespaces(ctx)
	if err != nil || len(nss) != 3 {
		t.Errorf("ListNamespaces = %v, %v", nss, err)
	}
}

// TestPostgresCatalogErrorHidesPassword: a refused login must not put the
// password in the error.
func TestPostgresCatalogErrorHidesPassword(t *testing.T) {
	pg := testenv.Shared(t)
	u, err := url.Parse(pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	const pw = "wr0ng-Pass/word%"
	u.User = url.UserPassword("postgres", pw)
	bad := *u
	bad.RawQuery = "sslmode=bogus" // refused by pgx's parser, which echoes its input
	for _, uri := range []string{u.String(), bad.String(), "postgres://postgres:" + pw + "@127.0.0.1:notaport/x"} {
		_, err = iceberg.Open(context.Background(), iceberg.Config{Warehouse: t.TempDir(), CatalogURI: uri})
		if err == nil {
			t.Fatalf("open %s succeeded", uri)
		}
		for _, leak := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw)} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("error leaks the password: %v", err)
			}
		}
		t.Logf("error: %v", err)
	}
}
