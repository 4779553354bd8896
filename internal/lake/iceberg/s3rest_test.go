package iceberg_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake"
	"github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/lake/laketest"
	"github.com/tidemark/tidemark/internal/lake/storage"
	"github.com/tidemark/tidemark/internal/testenv"
)

// setS3Env points this process's AWS SDK at store (t.Setenv: the test
// must not be parallel).
func setS3Env(t *testing.T, store *testenv.S3) {
	for _, kv := range store.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// TestLakeContractS3REST runs the format-neutral conformance suite on a
// warehouse in a real S3-compatible store (SeaweedFS) behind a real Iceberg
// REST catalog (Apache Iceberg's reference server, writing its metadata to
// the same bucket with S3FileIO): one catalog server per subtest, each
// warehouse a prefix of its own.
func TestLakeContractS3REST(t *testing.T) {
	store := testenv.StartS3(t)
	setS3Env(t, store)
	if err := store.CreateBucket(context.Background(), "lake"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	servers := map[string]*testenv.RESTCatalog{}
	laketest.Run(t, func(t *testing.T, dir string) lake.Catalog {
		wh := "s3://lake/" + filepath.Base(filepath.Dir(dir)) + "-" + filepath.Base(dir)
		mu.Lock()
		rc := servers[dir]
		if rc == nil {
			rc = testenv.StartRESTCatalog(t, store, wh)
			servers[dir] = rc
		}
		mu.Unlock()
		cat, err := iceberg.Open(context.Background(), iceberg.Config{Warehouse: wh, CatalogURI: "rest+" + rc.URL})
		if err != nil {
			t.Fatalf("open catalog: %v\nREST catalog log:\n%s", err, rc.Log())
		}
		return cat
	})
}

// TestS3ConfigErrorsAreNamed: a missing bucket, refused credentials, an
// unreachable store or REST catalog, a bad URL and an S3 warehouse without
// a shared catalog are each a named error that says what to fix, and
// none repeats a secret.
func TestS3ConfigErrorsAreNamed(t *testing.T) {
	store := testenv.StartS3(t)
	setS3Env(t, store)
	ctx := context.Background()
	if err := store.CreateBucket(ctx, "lake"); err != nil {
		t.Fatal(err)
	}
	rc := testenv.StartRESTCatalog(t, store, "s3://lake/wh")
	cat := "rest+" + rc.URL
	open := func(wh, uri string) error {
		c, err := iceberg.Open(ctx, iceberg.Config{Warehouse: wh, CatalogURI: uri})
		if err == nil {
			c.Close()
		}
		return err
	}
	check := func(what string, err error, code *fault.Error, says ...string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: opened, want an error", what)
			return
		}
		if !errors.Is(err, code) {
			t.Errorf("%s: %v: want code %s", what, err, code.Code)
		}
		for _, s := range says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %v: does not say %q", what, err, s)
			}
		}
		if strings.Contains(err.Error(), store.SecretKey) {
			t.Errorf("%s: the error leaks the secret key: %v", what, err)
		}
		t.Logf("%s: %v", what, err)
	}

	if err := open("s3://lake/wh", cat); err != nil {
		t.Fatalf("the good configuration: %v\n%s", err, rc.Log())
	}
	check("missing bucket", open("s3://nosuchbucket/wh", cat), storage.ErrObjectStore, "nosuchbucket", "does not exist")
	check("no catalog", open("s3://lake/wh", ""), fault.ErrBadConfig, "--catalog")
	check("no bucket", open("s3:///wh", cat), fault.ErrBadConfig, "bucket")
	check("credentials in the URL", open("s3://AKIA:"+store.SecretKey+"@lake/wh", cat), fault.ErrBadConfig, "AWS_ACCESS_KEY_ID")
	check("REST catalog down", open("s3://lake/wh", "rest+http://127.0.0.1:1"), iceberg.ErrCatalogUnreachable, "http://127.0.0.1:1", "--catalog")
	check("REST catalog credentials hidden", open("s3://lake/wh", "rest+http://id:"+store.SecretKey+"@127.0.0.1:1"), iceberg.ErrCatalogUnreachable, "http://127.0.0.1:1")

	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-"+store.SecretKey[:4])
	check("wrong secret key", open("s3://lake/wh", cat), storage.ErrObjectStore, "credentials", "AWS_SECRET_ACCESS_KEY")
	t.Setenv("AWS_SECRET_ACCESS_KEY", store.SecretKey)

	t.Setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1")
	check("store down", open("s3://lake/wh", cat), storage.ErrObjectStore, "http://127.0.0.1:1", "AWS_ENDPOINT_URL_S3")
}
