package testenv_test

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
)

// echoServer echoes every connection back until it is closed.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) (*testenv.Proxy, net.Conn) {
	t.Helper()
	p, err := testenv.NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

// roundTrip writes msg and reads it back, returning how long that took.
func roundTrip(t *testing.T, c net.Conn, msg []byte, deadline time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	c.SetDeadline(start.Add(deadline))
	if _, err := c.Write(msg); err != nil {
		return 0, err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return 0, err
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo through the proxy returned %q, want %q", got, msg)
	}
	return time.Since(start), nil
}

func TestProxyForwards(t *testing.T) {
	p, c := newProxy(t)
	if _, err := roundTrip(t, c, []byte("hello"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	go func() { c.Write(big) }()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(big))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("1 MiB through the proxy: err %v, equal %v", err, bytes.Equal(got, big))
	}
	if p.Accepted() != 1 || p.Active() != 1 {
		t.Errorf("accepted %d, active %d, want 1, 1", p.Accepted(), p.Active())
	}
}

func TestProxyResetAll(t *testing.T) {
	p, c := newProxy(t)
	if _, err := roundTrip(t, c, []byte("x"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.ResetAll(); n != 1 {
		t.Fatalf("ResetAll closed %d connections, want 1", n)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read after ResetAll succeeded, want a connection error")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("read after ResetAll timed out: the connection was not closed")
	}
	// New connections still work.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := roundTrip(t, c2, []byte("again"), 5*time.Second); err != nil {
		t.Fatalf("a new connection after ResetAll: %v", err)
	}
}

func TestProxyStall(t *testing.T) {
	p, c := newProxy(t)
	p.Stall(400 * time.Millisecond)
	took, err := roundTrip(t, c, []byte("stalled"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took < 350*time.Millisecond {
		t.Errorf("round trip during a 400ms stall took %s, want >= 350ms", took)
	}
	// Nothing is forwarded during a stall: a short read deadline expires.
	// (A minute: only Stall(0) below can release the byte within the
	// 5 s deadline, so no timing is asserted.)
	p.Stall(time.Minute)
	if _, err := roundTrip(t, c, []byte("x"), 200*time.Millisecond); err == nil {
		t.Fatal("a byte crossed the proxy during a stall")
	}
	p.Stall(0)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 1)
	if _, err := io.ReadFull(c, got); err != nil || got[0] != 'x' {
		t.Fatalf("after the stall ended: %q, %v; want the held byte", got, err)
	}
	if _, err := roundTrip(t, c, []byte("fast"), 5*time.Second); err != nil {
		t.Errorf("after Stall(0): round trip: %v", err)
	}
}

func TestProxyThrottle(t *testing.T) {
	p, c := newProxy(t)
	p.Throttle(40 << 10) // 40 KiB/s each way
	msg := bytes.Repeat([]byte("z"), 20<<10)
	took, err := roundTrip(t, c, msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// 20 KiB at 40 KiB/s is 0.5 s one way; the two directions overlap.
	if took < 400*time.Millisecond {
		t.Errorf("20 KiB at 40 KiB/s took %s, want >= 400ms", took)
	}
	p.Throttle(0)
	// Unthrottled, ten times as much crosses within a deadline shorter
	// than the 5 s each way that 40 KiB/s would need (loopback takes
	// milliseconds: a deadline, not a timed assertion).
	big := bytes.Repeat([]byte("u"), 200<<10)
	if took, err := roundTrip(t, c, big, 4*time.Second); err != nil {
		t.Errorf("unthrottled 200 KiB: %s, %v; want well under the 5 s a 40 KiB/s link needs", took, err)
	}
}

func TestProxyClose(t *testing.T) {
	p, c := newProxy(t)
	if _, err := roundTrip(t, c, []byte("x"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("the proxy still accepts after Close")
	}
}
