package storage_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/lake/storage"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestParseS3: warehouse URLs are normalized, and every way to get one
// wrong is a bad_config error that never repeats a secret.
func TestParseS3(t *testing.T) {
	good := map[string]string{
		"s3://lake":              "s3://lake",
		"s3://lake/":             "s3://lake",
		"s3://lake/shop/":        "s3://lake/shop",
		"s3a://lake//a/./b":      "s3://lake/a/b",
		" s3://my-lake.eu/a/b ":  "s3://my-lake.eu/a/b",
		"S3://lake/Mixed_Case-1": "s3://lake/Mixed_Case-1",
	}
	for in, want := range good {
		got, err := storage.ParseS3(in)
		if err != nil || got != want {
			t.Errorf("ParseS3(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := map[string]string{
		"s3:///prefix":                 "names no bucket",
		"s3://AKIA:supersecret@lake/p": "must not hold credentials",
		"s3://lake/p?region=eu":        "must not have a query",
		"s3://Lake_Upper/p":            "not a valid bucket name",
		"s3://lake/with space":         "must not need URL escaping",
		"gs://lake/p":                  "not supported",
		"s3://ab/p":                    "not a valid bucket name",
	}
	for in, says := range bad {
		_, err := storage.ParseS3(in)
		if err == nil || !errors.Is(err, fault.ErrBadConfig) || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseS3(%q) = %v; want bad_config saying %q", in, err, says)
		}
		if err != nil && strings.Contains(err.Error(), "supersecret") {
			t.Errorf("ParseS3(%q) leaks the secret: %v", in, err)
		}
	}
	for in, want := range map[string]bool{"./lake": false, "/var/lake": false, "file:///var/lake": false, "s3://lake": true, "gs://lake": true} {
		if got := storage.IsRemote(in); got != want {
			t.Errorf("IsRemote(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestS3PropsFromEnvironment: endpoint and region come from the AWS
// variables; credentials are never copied into FileIO properties.
func TestS3PropsFromEnvironment(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "supersecret")
	t.Setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9000")
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	p := storage.S3Props()
	if p["s3.endpoint"] != "http://127.0.0.1:9000" || p["s3.region"] != "us-east-1" {
		t.Errorf("S3Props = %v: want the endpoint and the default region", p)
	}
	for k, v := range p {
		if strings.Contains(v, "supersecret") || strings.Contains(v, "AKIAEXAMPLE") {
			t.Errorf("S3Props[%q] holds a credential", k)
		}
	}
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("TIDEMARK_S3_VIRTUAL_HOSTED", "1")
	if p := storage.S3Props(); p["s3.region"] != "eu-west-1" || p["s3.force-virtual-addressing"] != "true" {
		t.Errorf("S3Props = %v: want AWS_REGION and virtual-hosted requests", p)
	}
}

// TestLocalFiles: the small state files on a local warehouse are written
// whole, read back, listed and removed; a missing one is fs.ErrNotExist.
func TestLocalFiles(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	if err := storage.WriteFile(ctx, wh, "_tidemark/x/a.json", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if b, err := storage.ReadFile(ctx, wh, "_tidemark/x/a.json"); err != nil || string(b) != "1" {
		t.Fatalf("read back %q, %v", b, err)
	}
	if names, err := storage.List(ctx, wh, "_tidemark/x"); err != nil || len(names) != 1 || names[0] != "a.json" {
		t.Fatalf("list: %v, %v", names, err)
	}
	if err := storage.Remove(ctx, wh, "_tidemark/x/a.json"); err != nil {
		t.Fatal(err)
	}
	if err := storage.Remove(ctx, wh, "_tidemark/x/a.json"); err != nil {
		t.Fatalf("removing a missing file: %v", err)
	}
	if _, err := storage.ReadFile(ctx, wh, "_tidemark/x/a.json"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read a removed file: %v, want fs.ErrNotExist", err)
	}
}

// TestS3Files: the same on a real S3-compatible store (SeaweedFS), where
// the files are objects under the warehouse's prefix.
func TestS3Files(t *testing.T) {
	ctx := context.Background()
	store := testenv.StartS3(t)
	for _, kv := range store.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	if err := store.CreateBucket(ctx, "lake"); err != nil {
		t.Fatal(err)
	}
	wh := "s3://lake/shop"
	if err := storage.Check(ctx, wh, true); err != nil {
		t.Fatalf("check: %v", err)
	}
	if err := storage.Check(ctx, wh, false); err != nil {
		t.Fatalf("check for reading: %v", err)
	}
	for _, n := range []string{"a.json", "b.json"} {
		if err := storage.WriteFile(ctx, wh, "_tidemark/gold/shop/"+n, []byte(n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := storage.WriteFile(ctx, wh, "_tidemark/gold/shop/deeper/c.json", []byte("c")); err != nil {
		t.Fatal(err)
	}
	if b, err := storage.ReadFile(ctx, wh, "_tidemark/gold/shop/a.json"); err != nil || string(b) != "a.json" {
		t.Fatalf("read back %q, %v", b, err)
	}
	names, err := storage.List(ctx, wh, "_tidemark/gold/shop")
	if err != nil || strings.Join(names, ",") != "a.json,b.json" {
		t.Fatalf("list: %v, %v; want a.json,b.json (not the deeper one)", names, err)
	}
	if keys, _ := store.Keys(ctx, "lake", "shop/_tidemark/gold/shop/a.json"); len(keys) != 1 {
		t.Fatalf("the object is not at shop/_tidemark/gold/shop/a.json: %v", keys)
	}
	if err := storage.Remove(ctx, wh, "_tidemark/gold/shop/a.json"); err != nil {
		t.Fatal(err)
	}
	if err := storage.Remove(ctx, wh, "_tidemark/gold/shop/a.json"); err != nil {
		t.Fatalf("removing a missing object: %v", err)
	}
	if _, err := storage.ReadFile(ctx, wh, "_tidemark/gold/shop/a.json"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read a removed object: %v, want fs.ErrNotExist", err)
	}
	if names, err := storage.List(ctx, wh, "_tidemark/nothing"); err != nil || len(names) != 0 {
		t.Fatalf("list a missing prefix: %v, %v", names, err)
	}
	if keys, _ := store.Keys(ctx, "lake", "shop/_tidemark/write-check"); len(keys) != 0 {
		t.Errorf("the write check left objects behind: %v", keys)
	}
}
