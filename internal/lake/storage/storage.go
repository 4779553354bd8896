// Package storage says where a warehouse is — a local directory or a
// prefix of an S3 (or S3-compatible) bucket — and reads and writes the few
// small files tidemark keeps beside the tables there (silver's failure
// records, gold's state), through the same iceberg-go FileIO the tables
// use.
//
// An S3 warehouse is written "s3://bucket/prefix" (or s3a://). How to
// reach the bucket comes from the environment, the way every AWS tool
// reads it (the AWS SDK's default chain), and never from the URL:
//
//	AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN  credentials
//	                     (or AWS_PROFILE / ~/.aws, or an instance role)
//	AWS_REGION (AWS_DEFAULT_REGION)                              the region
//	AWS_ENDPOINT_URL_S3 (AWS_ENDPOINT_URL)                       an S3-compatible endpoint
//	                     (MinIO, SeaweedFS, Ceph...): path-style requests
//	TIDEMARK_S3_VIRTUAL_HOSTED=1                                 virtual-hosted requests
//	                     to that endpoint instead
//
// Credentials stay inside the SDK: they are not copied into FileIO
// properties, logs or errors.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	icebergio "github.com/apache/iceberg-go/io"
	_ "github.com/apache/iceberg-go/io/gocloud/s3" // registers the s3:// FileIO
	"github.com/aws/smithy-go"

	"github.com/tidemark/tidemark/internal/fault"
)

// ErrObjectStore is fault.ErrObjectStore: the S3 warehouse cannot be used
// as configured.
var ErrObjectStore = fault.ErrObjectStore

// IsS3 reports whether warehouse is an S3 URL (s3:// or s3a://).
func IsS3(warehouse string) bool {
	w := strings.ToLower(strings.TrimSpace(warehouse))
	return strings.HasPrefix(w, "s3://") || strings.HasPrefix(w, "s3a://")
}

// IsRemote reports whether warehouse is a URL of an object store rather
// than a local directory.
func IsRemote(warehouse string) bool {
	return IsS3(warehouse) || strings.Contains(warehouse, "://") && !strings.HasPrefix(warehouse, "file://")
}

// ParseS3 checks an S3 warehouse URL and returns it normalized:
// "s3://bucket" or "s3://bucket/prefix", without a trailing slash. A URL
// with credentials, a query, a missing bucket or an unsupported scheme is
// a named configuration error; the error never repeats what the URL held
// before the host.
func ParseS3(warehouse string) (string, error) {
	bad := func(msg string) error {
		return fault.With(fault.ErrBadConfig, "warehouse "+msg, nil)
	}
	if !IsS3(warehouse) {
		if IsRemote(warehouse) {
			scheme, _, _ := strings.Cut(warehouse, "://")
			return "", bad(fmt.Sprintf("%q: the %s:// scheme is not supported; use a local directory or s3://bucket/prefix", scheme+"://…", scheme))
		}
		return "", bad("is not an s3:// URL")
	}
	u, err := url.Parse(strings.TrimSpace(warehouse))
	if err != nil {
		return "", bad("is not a valid s3:// URL (want s3://bucket/prefix)")
	}
	if u.User != nil {
		return "", bad(fmt.Sprintf("s3://%s…: must not hold credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile or role) instead", u.Host))
	}
	if u.Host == "" {
		return "", bad("s3:// names no bucket: write s3://bucket/prefix")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", bad(fmt.Sprintf("s3://%s%s: must not have a query or fragment; set the endpoint and region with AWS_ENDPOINT_URL_S3 and AWS_REGION", u.Host, u.Path))
	}
	if !validBucket(u.Host) {
		return "", bad(fmt.Sprintf("s3://%s: %q is not a valid bucket name (3-63 lower-case letters, digits, '.' and '-')", u.Host, u.Host))
	}
	p := strings.Trim(path.Clean("/"+u.Path), "/")
	if (&url.URL{Path: p}).EscapedPath() != p {
		return "", bad(fmt.Sprintf("s3://%s/%s: the prefix must not need URL escaping (no spaces, '%%' or non-ASCII): other Iceberg engines would not find the files", u.Host, p))
	}
	out := "s3://" + u.Host
	if p != "" {
		out += "/" + p
	}
	return out, nil
}

func validBucket(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	for _, r := range b {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-') {
			return false
		}
	}
	return true
}

// S3Props are the iceberg-go FileIO properties for an S3 warehouse from
// the environment (see the package documentation): the endpoint and
// region only. Credentials are left to the SDK's default chain.
func S3Props() map[string]string {
	props := map[string]string{}
	endpoint := firstEnv("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_S3_ENDPOINT")
	if endpoint != "" {
		props[icebergio.S3EndpointURL] = endpoint
		if os.Getenv("TIDEMARK_S3_VIRTUAL_HOSTED") == "1" {
			props[icebergio.S3ForceVirtualAddressing] = "true"
		}
	}
	if r := firstEnv("AWS_REGION", "AWS_DEFAULT_REGION"); r != "" {
		props[icebergio.S3Region] = r
	} else if endpoint != "" {
		// S3-compatible stores accept any region; the SDK needs one.
		props[icebergio.S3Region] = "us-east-1"
	}
	return props
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(os.Getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// Check makes sure the S3 warehouse can be written (write is true: an
// object is written and deleted) or listed, before any table is touched,
// and turns the store's answer into a named error that says what to fix.
func Check(ctx context.Context, warehouse string, write bool) error {
	wh, err := ParseS3(warehouse)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fsys, err := icebergio.LoadFS(ctx, S3Props(), wh)
	if err != nil {
		return Classify(err, wh, "open")
	}
	if !write {
		lfs, ok := fsys.(icebergio.ListableIO)
		if !ok {
			return nil
		}
		err = lfs.WalkDir(wh, func(string, fs.DirEntry, error) error { return fs.SkipAll })
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return Classify(err, wh, "read")
		}
		return nil
	}
	wfs, ok := fsys.(icebergio.WriteFileIO)
	if !ok {
		return fault.With(ErrObjectStore, fmt.Sprintf("the FileIO of %s cannot write", wh), nil)
	}
	probe := fmt.Sprintf("%s/_tidemark/write-check-%d-%d", wh, os.Getpid(), time.Now().UnixNano())
	if err := wfs.WriteFile(probe, []byte("tidemark")); err != nil {
		return Classify(err, wh, "write")
	}
	if err := fsys.Remove(probe); err != nil {
		return Classify(err, wh, "delete from")
	}
	return nil
}

// Classify turns an error of the object store into ErrObjectStore with
// the fix (op: "write", "read"...), or returns it marked transient when
// the store is only unavailable (a retry may pass).
func Classify(err error, wh, op string) error {
	if err == nil {
		return nil
	}
	code := ""
	var api smithy.APIError
	if errors.As(err, &api) {
		code = api.ErrorCode()
	}
	msg := err.Error()
	has := func(s string) bool { return code == s || strings.Contains(msg, s) }
	where := wh
	switch {
	case has("NoSuchBucket"):
		u, _ := url.Parse(wh)
		return fault.With(ErrObjectStore, fmt.Sprintf("cannot %s the warehouse %s: the bucket %q does not exist: create it, or fix --warehouse (and AWS_ENDPOINT_URL_S3 / AWS_REGION)", op, where, u.Host), nil)
	case has("InvalidAccessKeyId"), has("SignatureDoesNotMatch"), has("InvalidToken"), has("ExpiredToken"), has("no EC2 IMDS role found"), has("failed to retrieve credentials"), has("AnonymousUser"):
		return fault.With(ErrObjectStore, fmt.Sprintf("cannot %s the warehouse %s: the S3 credentials were refused or not found (%s): check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)", op, where, codeOr(code, "no valid credentials")), nil)
	case has("AccessDenied"), has("Forbidden"):
		return fault.With(ErrObjectStore, fmt.Sprintf("cannot %s the warehouse %s: access denied: give these credentials s3:GetObject, s3:PutObject, s3:DeleteObject and s3:ListBucket on it", op, where), nil)
	}
	var nerr net.Error
	var oerr *net.OpError
	if errors.As(err, &oerr) || errors.As(err, &nerr) || strings.Contains(msg, "connection refused") || strings.Contains(msg, "no such host") {
		ep := S3Props()[icebergio.S3EndpointURL]
		if ep == "" {
			ep = "the AWS S3 endpoint"
		}
		return fault.With(ErrObjectStore, fmt.Sprintf("cannot %s the warehouse %s: cannot reach %s: check AWS_ENDPOINT_URL_S3 and the network", op, where, ep), nil)
	}
	return fmt.Errorf("%s the warehouse %s: %w", op, where, err)
}

func codeOr(code, alt string) string {
	if code != "" {
		return code
	}
	return alt
}

// fileIO returns the FileIO of an S3 warehouse and its normalized URL.
func fileIO(ctx context.Context, warehouse string) (icebergio.IO, string, error) {
	wh, err := ParseS3(warehouse)
	if err != nil {
		return nil, "", err
	}
	fsys, err := icebergio.LoadFS(ctx, S3Props(), wh)
	if err != nil {
		return nil, "", Classify(err, wh, "open")
	}
	return fsys, wh, nil
}

// WriteFile writes rel (a slash-separated path under the warehouse)
// whole: a reader sees the old content or the new, never a part (a
// rename on a local disk; one PUT on S3).
func WriteFile(ctx context.Context, warehouse, rel string, data []byte) error {
	if !IsS3(warehouse) {
		p := filepath.Join(warehouse, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, p)
	}
	fsys, wh, err := fileIO(ctx, warehouse)
	if err != nil {
		return err
	}
	wfs, ok := fsys.(icebergio.WriteFileIO)
	if !ok {
		return fmt.Errorf("the FileIO of %s cannot write", wh)
	}
	if err := wfs.WriteFile(wh+"/"+rel, data); err != nil {
		return Classify(err, wh, "write")
	}
	return nil
}

// ReadFile reads rel under the warehouse; a missing file is an error
// matching fs.ErrNotExist.
func ReadFile(ctx context.Context, warehouse, rel string) ([]byte, error) {
	if !IsS3(warehouse) {
		return os.ReadFile(filepath.Join(warehouse, filepath.FromSlash(rel)))
	}
	fsys, wh, err := fileIO(ctx, warehouse)
	if err != nil {
		return nil, err
	}
	f, err := fsys.Open(wh + "/" + rel)
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("%s/%s: %w", wh, rel, fs.ErrNotExist)
		}
		return nil, Classify(err, wh, "read")
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, Classify(err, wh, "read")
	}
	return b, nil
}

// Remove deletes rel under the warehouse; a missing file is not an error.
func Remove(ctx context.Context, warehouse, rel string) error {
	if !IsS3(warehouse) {
		err := os.Remove(filepath.Join(warehouse, filepath.FromSlash(rel)))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	fsys, wh, err := fileIO(ctx, warehouse)
	if err != nil {
		return err
	}
	if err := fsys.Remove(wh + "/" + rel); err != nil && !isNotFound(err) {
		return Classify(err, wh, "delete from")
	}
	return nil
}

// List returns the names (relative to dir, a slash-separated path under
// the warehouse) of the files directly in dir; a missing dir has none.
func List(ctx context.Context, warehouse, dir string) ([]string, error) {
	if !IsS3(warehouse) {
		ents, err := os.ReadDir(filepath.Join(warehouse, filepath.FromSlash(dir)))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		var out []string
		for _, e := range ents {
			if !e.IsDir() {
				out = append(out, e.Name())
			}
		}
		return out, err
	}
	fsys, wh, err := fileIO(ctx, warehouse)
	if err != nil {
		return nil, err
	}
	lfs, ok := fsys.(icebergio.ListableIO)
	if !ok {
		return nil, fmt.Errorf("the FileIO of %s cannot list", wh)
	}
	root := wh + "/" + strings.Trim(dir, "/")
	var out []string
	err = lfs.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.TrimSuffix(p, "/") != root {
				return fs.SkipDir
			}
			return nil
		}
		out = append(out, path.Base(p))
		return nil
	})
	if err != nil && !isNotFound(err) {
		return nil, Classify(err, wh, "list")
	}
	return out, nil
}

func isNotFound(err error) bool {
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) && (api.ErrorCode() == "NoSuchKey" || api.ErrorCode() == "NotFound") {
		return true
	}
	return strings.Contains(err.Error(), "NoSuchKey") || strings.Contains(err.Error(), "code=NotFound")
}
