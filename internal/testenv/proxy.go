package testenv

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of a server (PostgreSQL), for
// network faults (RELIABILITY.md row 6): it can reset every connection, stop
// forwarding for a while (a stall longer than wal_sender_timeout), or
// throttle the link. Point the client at Addr instead of the server.
// Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu         sync.Mutex
	conns      map[*proxyConn]struct{}
	stallUntil time.Time
	closed     bool

	rate     atomic.Int64 // bytes per second per direction of a connection; 0 = unlimited
	accepted atomic.Int64
	resets   atomic.Int64
	wg       sync.WaitGroup
}

// proxyConn is one client connection and its upstream connection.
type proxyConn struct {
	client, server net.Conn
	done           chan struct{} // closed when the pair is torn down
	once           sync.Once
}

// NewProxy listens on a free loopback port and forwards every connection it
// accepts to target (host:port). The caller must Close it.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testenv: proxy listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Accepted is how many client connections the proxy has accepted so far.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Active is how many connections are open through the proxy now.
func (p *Proxy) Active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// ResetAll closes every open connection, both sides, with a TCP reset
// (SO_LINGER 0), as a cut link or a restarted middlebox would. New
// connections are accepted as before. It returns how many it closed.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.reset()
	}
	p.resets.Add(int64(len(conns)))
	return len(conns)
}

// Stall stops forwarding bytes, in both directions and on every connection
// (open or new), for d: the connections stay open but silent, as on a link
// that drops every packet. Calling it again extends or shortens the stall
// from now; Stall(0) ends it.
func (p *Proxy) Stall(d time.Duration) {
	p.mu.Lock()
	p.stallUntil = time.Now().Add(d)
	p.mu.Unlock()
}

// Throttle limits every direction of every connection to bytesPerSec;
// 0 (or less) removes the limit.
func (p *Proxy) Throttle(bytesPerSec int64) {
	if bytesPerSec < 0 {
		bytesPerSec = 0
	}
	p.rate.Store(bytesPerSec)
}

// Close stops accepting, resets every open connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.accepted.Add(1)
		server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
		if err != nil {
			abort(client)
			continue
		}
		c := &proxyConn{client: client, server: server, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.reset()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, c.server, c.client)
		go p.pipe(c, c.client, c.server)
	}
}

// pipe copies src to dst, honouring stalls and the throttle, until either
// side fails; then it tears the pair down.
func (p *Proxy) pipe(c *proxyConn, dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		c.reset()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n := len(buf)
		if r := p.rate.Load(); r > 0 {
			// Small reads keep a throttled link smooth.
			n = int(min(int64(n), max(r/20, 1)))
		}
		k, err := src.Read(buf[:n])
		if k > 0 {
			if !p.waitStall(c) {
				return
			}
			if !p.forward(c, dst, buf[:k]) {
				return
			}
		}
		if err != nil {
			// EOF included: PostgreSQL's protocol never half-closes, so
			// one side ending ends the pair.
			return
		}
	}
}

// forward writes b to dst. Under a throttle it is paced: each piece of at
// most rate/20 bytes is delayed by its transfer time before it is written,
// so data is late by what the link would take (a read that started before
// Throttle was called may hold more than one piece).
func (p *Proxy) forward(c *proxyConn, dst net.Conn, b []byte) bool {
	for len(b) > 0 {
		piece := b
		if r := p.rate.Load(); r > 0 {
			piece = b[:min(int64(len(b)), max(r/20, 1))]
			select {
			case <-time.After(time.Duration(int64(len(piece)) * int64(time.Second) / r)):
			case <-c.done:
				return false
			}
		}
		if _, err := dst.Write(piece); err != nil {
			return false
		}
		b = b[len(piece):]
	}
	return true
}

// waitStall blocks while a stall is in effect; false if the pair was torn
// down meanwhile.
func (p *Proxy) waitStall(c *proxyConn) bool {
	for {
		p.mu.Lock()
		d := time.Until(p.stallUntil)
		p.mu.Unlock()
		if d <= 0 {
			return true
		}
		t := time.NewTimer(min(d, 50*time.Millisecond)) // re-read: Stall may shorten it
		select {
		case <-t.C:
		case <-c.done:
			t.Stop()
			return false
		}
	}
}

func (c *proxyConn) reset() {
	c.once.Do(func() {
		close(c.done)
		abort(c.client)
		abort(c.server)
	})
}

// abort closes conn with a TCP reset rather than a FIN.
func abort(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
