package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// A real S3-compatible object store for tests: SeaweedFS (`weed server`
// with its master, volume server, filer and S3 gateway in one process),
// built by scripts/setup-test-env.sh into .test-cache/seaweedfs/weed, on
// free loopback ports, its data in a temporary directory, with one static
// identity (AccessKey/SecretKey) and no bucket created on upload.
//
// Environment:
//
//	TIDEMARK_WEED           the weed binary (default: .test-cache/seaweedfs/weed)
//	TIDEMARK_REQUIRE_S3     "1": a missing binary fails the test instead of skipping it

// ErrNoSeaweedFS reports that the weed binary was not found.
var ErrNoSeaweedFS = errors.New("testenv: the SeaweedFS weed binary not found (run scripts/setup-test-env.sh; TIDEMARK_WEED)")

// S3 is a running S3-compatible server.
type S3 struct {
	// Endpoint is the S3 gateway's URL, http://127.0.0.1:port.
	Endpoint string
	// AccessKey and SecretKey are the one identity's credentials.
	AccessKey, SecretKey string
	// Region is the region clients should sign with (any is accepted).
	Region string
	dir    string
	cmd    *exec.Cmd
	done   chan struct{}
	log    string
}

// weedBinary returns the weed binary, or ErrNoSeaweedFS.
func weedBinary() (string, error) {
	bin := os.Getenv("TIDEMARK_WEED")
	if bin == "" {
		if root, err := RepoRoot(); err == nil {
			bin = filepath.Join(root, ".test-cache", "seaweedfs", "weed")
		}
	}
	if !isExecutable(bin) {
		return "", fmt.Errorf("%w: no executable at %q", ErrNoSeaweedFS, bin)
	}
	return bin, nil
}

// StartS3 starts an object store for this test and stops it when the test
// ends. Without the binary the test is skipped, unless TIDEMARK_REQUIRE_S3=1.
func StartS3(t testing.TB) *S3 {
	t.Helper()
	s, err := NewS3()
	if err != nil {
		if errors.Is(err, ErrNoSeaweedFS) && os.Getenv("TIDEMARK_REQUIRE_S3") != "1" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("testenv: stop SeaweedFS: %v", err)
		}
	})
	return s
}

// NewS3 starts an object store; Stop stops it and removes its files.
func NewS3() (*S3, error) {
	bin, err := weedBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tidemark-seaweedfs-")
	if err != nil {
		return nil, err
	}
	s := &S3{dir: dir, log: filepath.Join(dir, "weed.log"), AccessKey: "tidemarktestkey", SecretKey: "tidemark-test-secret-" + randomHex(8), Region: "us-east-1"}
	ident := fmt.Sprintf(`{"identities":[{"name":"tidemark","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`,
		s.AccessKey, s.SecretKey)
	if err := os.WriteFile(filepath.Join(dir, "s3.json"), []byte(ident), 0o600); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	names := []string{"master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
		"filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg", "s3.port.lance"}
	free, err := freePorts(len(names))
	if err != nil {
		return nil, err
	}
	ports := map[string]int{}
	for i, name := range names {
		ports[name] = free[i]
	}
	args := []string{"server", "-dir=" + filepath.Join(dir, "data"), "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.telemetry=false", "-master.volumeSizeLimitMB=64", "-volume.max=0",
		"-filer", "-s3", "-s3.config=" + filepath.Join(dir, "s3.json"), "-s3.autoCreateBucket=false",
		"-filer.localSocket=" + filepath.Join(dir, "filer.sock"), "-s3.localSocket=" + filepath.Join(dir, "s3.sock")}
	for name, p := range ports {
		args = append(args, "-"+name+"="+strconv.Itoa(p))
	}
	s.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", ports["s3.port"])
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s.done = make(chan struct{})
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testenv: start SeaweedFS: %w", err)
	}
	go func() {
		s.cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	if err := s.waitReady(2 * time.Minute); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady waits until the gateway answers a signed ListBuckets and can
// store an object (the volume server has joined the master).
func (s *S3) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	probe := "tidemark-testenv-probe"
	created := false
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("testenv: SeaweedFS exited at start:\n%s", s.Log())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if c, err := net.DialTimeout("tcp", s.Endpoint[len("http://"):], time.Second); err == nil {
			c.Close()
			if !created {
				last = s.CreateBucket(ctx, probe)
				created = last == nil
			}
			if created {
				_, last = s.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(probe), Key: aws.String("probe"), Body: http.NoBody})
				if last == nil {
					cancel()
					return nil
				}
			}
		} else {
			last = err
		}
		cancel()
		time.Sleep(300 * time.Millisecond)
	}
	return fmt.Errorf("testenv: SeaweedFS did not start within %s (last: %v):\n%s", limit, last, s.Log())
}

// Client returns an S3 client signed with the identity's credentials.
func (s *S3) Client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
		Region:       s.Region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
}

// CreateBucket creates a bucket.
func (s *S3) CreateBucket(ctx context.Context, name string) error {
	_, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	return err
}

// Keys lists the keys under prefix in bucket.
func (s *S3) Keys(ctx context.Context, bucket, prefix string) ([]string, error) {
	var out []string
	p := s3.NewListObjectsV2Paginator(s.Client(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			out = append(out, aws.ToString(o.Key))
		}
	}
	return out, nil
}

// Env is the AWS environment that points a client (tidemark, PyIceberg)
// at this server with its credentials.
func (s *S3) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + s.Region,
		"AWS_ENDPOINT_URL_S3=" + s.Endpoint,
		// No shared config or IMDS lookups on a test machine.
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null",
		"AWS_SHARED_CREDENTIALS_FILE=/dev/null",
	}
}

// Stop stops the server and removes its files.
func (s *S3) Stop() error {
	stopGroup(s.cmd, s.done, 20*time.Second)
	return os.RemoveAll(s.dir)
}

// Log returns the end of the server's log (for a failing test's message).
func (s *S3) Log() string {
	b, _ := os.ReadFile(s.log)
	return tailOf(string(b), 6000)
}

// freePorts returns n distinct free loopback ports (all held open until
// every one is chosen, so none is handed out twice).
func freePorts(n int) ([]int, error) {
	var out []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
