// Package faultproxy is a TCP proxy for tests that sits between clients and
// a server (a redis-server, in this module) and injects network faults:
// added latency and jitter, a blackhole that silently swallows traffic, and
// connection resets.
//
// It works on the byte stream in userspace and does not model packets: there
// is no packet loss, reordering, duplication or bandwidth limit, and kernel
// socket buffers are not constrained. Latency is added per chunk as read
// from a socket. The proxy acknowledges data at the TCP level as soon as it
// reads it, so data dropped by a blackhole is gone for good, where a real
// network would retransmit it or eventually break the connection: a
// connection that lost data is corrupt after Heal and should be reset
// (ResetAll). A FIN or RST reaching the proxy during a blackhole is dropped
// too; that connection stays open until ResetAll or Close.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dialTimeout bounds how long a connection to the target may take.
const dialTimeout = 5 * time.Second

// Proxy forwards connections accepted on a loopback port to a target
// address. Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // cancelled by Close: aborts dials in progress
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine of the proxy

	mu        sync.Mutex
	latency   time.Duration
	upstream  time.Duration // more latency, client to server only
	jitter    time.Duration
	blackhole bool
	closed    bool
	links     map[*link]struct{}
}

// Start listens on a free loopback port and forwards every accepted
// connection to target. The proxy is closed in t.Cleanup.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// New is Start without a testing.TB: the caller must Close the proxy.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{target: target, ln: ln, ctx: ctx, cancel: cancel, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients should connect to instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays data by d in each direction, so a round trip takes 2d
// longer. It applies to data read after the call; order is preserved.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// SetUpstreamLatency delays data from clients to the server by d more than
// the latency, leaving answers as they are: a request then reaches the
// server long after it was sent, while the client hears back at once once
// it got there.
func (p *Proxy) SetUpstreamLatency(d time.Duration) {
	p.mu.Lock()
	p.upstream = d
	p.mu.Unlock()
}

// SetJitter adds a random delay in [0,d) to each chunk of data read after
// the call, on top of the latency. Order is still preserved: a chunk never
// overtakes one read before it.
func (p *Proxy) SetJitter(d time.Duration) {
	p.mu.Lock()
	p.jitter = d
	p.mu.Unlock()
}

// Blackhole silently drops, from now on, all data in both directions,
// including data delayed by latency and not yet delivered. Connections stay
// open and new ones are accepted: peers see a hang, as with a dead path.
func (p *Proxy) Blackhole() { p.setBlackhole(true) }

// Heal ends the blackhole. Connections that lost data are not repaired:
// callers usually ResetAll after Heal.
func (p *Proxy) Heal() { p.setBlackhole(false) }

func (p *Proxy) setBlackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
}

func (p *Proxy) blackholed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blackhole
}

// due returns when data read now is to be delivered, upstream when it goes
// to the server, and false when it is to be dropped.
func (p *Proxy) due(upstream bool) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.latency
	if upstream {
		d += p.upstream
	}
	if p.jitter > 0 {
		d += rand.N(p.jitter)
	}
	return time.Now().Add(d), !p.blackhole
}

// ResetAll aborts every current connection with a TCP RST on both sides.
func (p *Proxy) ResetAll() {
	for _, l := range p.snapshot() {
		l.close(true)
	}
}

// Conns returns the number of open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops listening, closes every connection and returns once all the
// proxy's goroutines have exited. Calling it again is harmless.
func (p *Proxy) Close() error {
	p.mu.Lock()
	first := !p.closed
	p.closed = true
	p.mu.Unlock()
	var err error
	if first {
		p.cancel()
		err = p.ln.Close()
		for _, l := range p.snapshot() {
			l.close(false)
		}
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) snapshot() []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	return links
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed (or the listener failed): accept no more
		}
		p.wg.Add(1)
		go p.connect(c)
	}
}

// connect dials the target for an accepted client and starts forwarding.
func (p *Proxy) connect(client net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		reset(client) // as a refused connection would look
		return
	}
	l := &link{p: p, client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.links[l] = struct{}{}
	p.wg.Add(4)
	p.mu.Unlock()
	l.forward(client, server, true)
	l.forward(server, client, false)
}

// link is one proxied connection: a client side and a server side.
type link struct {
	p              *Proxy
	client, server net.Conn
	done           chan struct{} // closed by close
	once           sync.Once
	finished       atomic.Int32 // directions that delivered their FIN
}

// close closes both sides, with an RST if rst, and forgets the link.
func (l *link) close(rst bool) {
	l.once.Do(func() {
		close(l.done)
		for _, c := range []net.Conn{l.client, l.server} {
			if rst {
				reset(c)
			} else {
				_ = c.Close()
			}
		}
		l.p.mu.Lock()
		delete(l.p.links, l)
		l.p.mu.Unlock()
	})
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// chunk is data read from one side, or its FIN, and when to deliver it.
type chunk struct {
	data []byte
	eof  bool
	due  time.Time
}

// queue holds the chunks of one direction in the order they were read.
type queue struct {
	mu    sync.Mutex
	items []chunk
	wake  chan struct{} // signalled on push; capacity 1
}

func (q *queue) push(c chunk) {
	q.mu.Lock()
	q.items = append(q.items, c)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queue) pop() (chunk, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return chunk{}, false
	}
	c := q.items[0]
	q.items[0] = chunk{}
	q.items = q.items[1:]
	return c, true
}

// forward starts the reader and the writer of the direction src to dst,
// which is the server's if upstream.
func (l *link) forward(src, dst net.Conn, upstream bool) {
	q := &queue{wake: make(chan struct{}, 1)}
	go l.read(src, q, upstream)
	go l.write(dst, q)
}

// read timestamps what src sends and queues it, never waiting for delivery.
func (l *link) read(src net.Conn, q *queue, upstream bool) {
	defer l.p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		due, pass := l.p.due(upstream)
		if n > 0 && pass {
			q.push(chunk{data: bytes.Clone(buf[:n]), due: due})
		}
		switch {
		case err == nil:
		case !pass: // the FIN or RST is lost in the blackhole too
			return
		case errors.Is(err, io.EOF):
			q.push(chunk{eof: true, due: due})
			return
		default: // src reset us, or the link was closed
			l.close(true)
			return
		}
	}
}

// write delivers queued chunks to dst at their due times, in order.
func (l *link) write(dst net.Conn, q *queue) {
	defer l.p.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		c, ok := q.pop()
		if !ok {
			select {
			case <-q.wake:
				continue
			case <-l.done:
				return
			}
		}
		if wait := time.Until(c.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-l.done:
				return
			}
		}
		if l.p.blackholed() {
			continue // in flight when the path died
		}
		if c.eof {
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			if l.finished.Add(1) == 2 {
				l.close(false)
			}
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			l.close(true)
			return
		}
	}
}
