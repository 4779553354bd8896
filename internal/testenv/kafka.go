package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A real Apache Kafka broker (KRaft, broker and controller in one JVM) for
// tests, started from the Maven Central jars scripts/setup-test-env.sh puts
// in .test-cache/kafka/lib (org.apache.kafka:kafka_2.13 and its
// dependencies) on free loopback ports, its log directory in a temporary
// directory.
//
// Environment:
//
//	TIDEMARK_KAFKA_LIBS      directory of the broker's jars (the Makefile sets it)
//	TIDEMARK_REQUIRE_KAFKA   "1": a missing broker fails the test instead of skipping it

// ErrNoKafka reports that the broker's jars (or java) were not found.
var ErrNoKafka = errors.New("testenv: the Kafka broker's jars or java not found (run scripts/setup-test-env.sh; TIDEMARK_KAFKA_LIBS)")

// Kafka is a running broker.
type Kafka struct {
	// Addr is the broker's host:port (PLAINTEXT, no auth).
	Addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
	// start starts the broker process on the prepared directory.
	start func() error
}

// kafkaLibs returns the jar directory, or ErrNoKafka.
func kafkaLibs() (string, error) {
	dir := os.Getenv("TIDEMARK_KAFKA_LIBS")
	if dir == "" {
		// From a package directory of this repository (go test's working
		// directory), the setup script's cache at the root.
		wd, _ := os.Getwd()
		for d := wd; d != filepath.Dir(d); d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				dir = filepath.Join(d, ".test-cache", "kafka", "lib")
				break
			}
		}
	}
	jars, _ := filepath.Glob(filepath.Join(dir, "kafka_2.13-*.jar"))
	if len(jars) == 0 {
		return "", fmt.Errorf("%w: no kafka_2.13 jar in %q", ErrNoKafka, dir)
	}
	if _, err := exec.LookPath("java"); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoKafka, err)
	}
	return dir, nil
}

// StartKafka starts a broker for this test and stops it when the test
// ends. Without the jars the test is skipped, unless TIDEMARK_REQUIRE_KAFKA=1.
func StartKafka(t testing.TB) *Kafka {
	t.Helper()
	k, err := NewKafka()
	if err != nil {
		if errors.Is(err, ErrNoKafka) && os.Getenv("TIDEMARK_REQUIRE_KAFKA") != "1" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k.Stop(); err != nil {
			t.Errorf("testenv: stop Kafka: %v", err)
		}
	})
	return k
}

// NewKafka starts a broker; Stop stops it and removes its files.
func NewKafka() (*Kafka, error) {
	libs, err := kafkaLibs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tidemark-kafka-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cport, err := freePort()
	if err != nil {
		return nil, err
	}
	k := &Kafka{Addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, log: filepath.Join(dir, "kafka.log")}
	props := strings.Join([]string{
		"process.roles=broker,controller",
		"node.id=1",
		fmt.Sprintf("controller.quorum.voters=1@127.0.0.1:%d", cport),
		fmt.Sprintf("listeners=PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", port, cport),
		"advertised.listeners=PLAINTEXT://" + k.Addr,
		"controller.listener.names=CONTROLLER",
		"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"inter.broker.listener.name=PLAINTEXT",
		"log.dirs=" + filepath.Join(dir, "data"),
		"num.partitions=1",
		"offsets.topic.replication.factor=1",
		"transaction.state.log.replication.factor=1",
		"transaction.state.log.min.isr=1",
		"group.initial.rebalance.delay.ms=0",
		"auto.create.topics.enable=false",
		// Retention is checked every 5 s, so a test that shortens it sees
		// the data go soon.
		"log.retention.check.interval.ms=5000",
		"log.segment.delete.delay.ms=0",
		"message.max.bytes=20971520",
		"",
	}, "\n")
	cfg := filepath.Join(dir, "server.properties")
	if err := os.WriteFile(cfg, []byte(props), 0o644); err != nil {
		return nil, err
	}
	cp := filepath.Join(libs, "*")
	java := func(args ...string) *exec.Cmd {
		c := exec.Command("java", append([]string{"-Xmx512m", "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Dlog4j2.level=WARN", "-cp", cp}, args...)...)
		c.Dir = dir
		return c
	}
	out, err := java("kafka.tools.StorageTool", "format", "-t", "tidemark-test-cluster-0001", "-c", cfg).CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("testenv: format the Kafka storage: %v\n%s", err, out)
	}
	k.start = func() error {
		logf, err := os.OpenFile(k.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		k.cmd = java("kafka.Kafka", cfg)
		k.cmd.Stdout, k.cmd.Stderr = logf, logf
		k.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		k.done = make(chan struct{})
		if err := k.cmd.Start(); err != nil {
			logf.Close()
			return fmt.Errorf("testenv: start Kafka: %w", err)
		}
		go func(cmd *exec.Cmd, done chan struct{}) {
			cmd.Wait()
			logf.Close()
			close(done)
		}(k.cmd, k.done)
		return k.waitReady(2 * time.Minute)
	}
	if err := k.start(); err != nil {
		k.Stop()
		os.RemoveAll(dir)
		return nil, err
	}
	return k, nil
}

// Restart starts the broker again after Kill, on the same ports and data.
func (k *Kafka) Restart() error { return k.start() }

// waitReady waits until the broker accepts connections and has logged
// that it started.
func (k *Kafka) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-k.done:
			b, _ := os.ReadFile(k.log)
			return fmt.Errorf("testenv: Kafka exited at start:\n%s", tailOf(string(b), 4000))
		default:
		}
		if c, err := net.DialTimeout("tcp", k.Addr, time.Second); err == nil {
			c.Close()
			if k.ready() {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	b, _ := os.ReadFile(k.log)
	return fmt.Errorf("testenv: Kafka did not start within %s:\n%s", limit, tailOf(string(b), 4000))
}

// ready reports whether the broker answers metadata with itself as a
// broker and a controller elected (it can then create topics).
func (k *Kafka) ready() bool {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr))
	if err != nil {
		return false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	m, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	return err == nil && len(m.Brokers) > 0 && m.Controller >= 0
}

// Kill stops the broker with SIGKILL (a crash).
func (k *Kafka) Kill() {
	if k.cmd != nil && k.cmd.Process != nil {
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
		<-k.done
	}
}

// Stop stops the broker and removes its files.
func (k *Kafka) Stop() error {
	stopGroup(k.cmd, k.done, 20*time.Second)
	return os.RemoveAll(k.dir)
}

// Log returns the broker's log (for a failing test's message).
func (k *Kafka) Log() string {
	b, _ := os.ReadFile(k.log)
	return tailOf(string(b), 8000)
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
