package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// slack is how much later than modelled a round trip may complete: a loaded
// 2-core machine running -race tests can stall goroutines for tens of ms, so
// this is an order of magnitude above what scheduling should cost.
const slack = 900 * time.Millisecond

// setup starts a server, a proxy in front of it and a client through the
// proxy; mod adjusts the client options.
func setup(t *testing.T, mod func(*redis.Options)) (*redistest.Server, *faultproxy.Proxy, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	return srv, p, client(t, p, srv, mod)
}

func client(t *testing.T, p *faultproxy.Proxy, srv *redistest.Server, mod func(*redis.Options)) *redis.Client {
	opt := srv.Options()
	opt.Addr = p.Addr()
	if mod != nil {
		mod(opt)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing the test after 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
}

func ping(t *testing.T, c *redis.Client) time.Duration {
	t.Helper()
	start := time.Now()
	if err := c.Ping(ctxT(t, 5*time.Second)).Err(); err != nil {
		t.Fatalf("PING through the proxy: %v", err)
	}
	return time.Since(start)
}

// TestForward checks that commands and large values pass through and that a
// client closing its connection closes the proxied one.
func TestForward(t *testing.T) {
	_, p, c := setup(t, nil)
	ping(t, c)
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns() = %d after one PING, want 1", n)
	}
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB: many chunks
	ctx := ctxT(t, 10*time.Second)
	if err := c.Set(ctx, "faultproxy:big", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "faultproxy:big").Result(); err != nil || got != big {
		t.Fatalf("GET of a 1 MiB value: len %d, err %v", len(got), err)
	}
	_ = c.Close()
	waitFor(t, "Conns() == 0 after the client closed", func() bool { return p.Conns() == 0 })
}

// TestLatency checks that SetLatency(d) adds 2d to a round trip.
func TestLatency(t *testing.T) {
	_, p, c := setup(t, nil)
	ping(t, c) // connect (and handshake) before measuring
	const d = 50 * time.Millisecond
	p.SetLatency(d)
	for range 3 {
		if rtt := ping(t, c); rtt < 2*d || rtt >= 2*d+slack {
			t.Fatalf("PING took %v with latency %v, want [%v, %v)", rtt, d, 2*d, 2*d+slack)
		} else {
			t.Logf("PING with latency %v: %v", d, rtt)
		}
	}
	p.SetLatency(0)
	if rtt := ping(t, c); rtt >= slack {
		t.Fatalf("PING took %v after SetLatency(0)", rtt)
	}
}

// TestUpstreamLatency checks that SetUpstreamLatency(d) delays requests
// only: a round trip takes d longer, not 2d.
func TestUpstreamLatency(t *testing.T) {
	_, p, c := setup(t, nil)
	ping(t, c)
	const d = time.Second // above slack, so that 2d is out of range
	p.SetUpstreamLatency(d)
	if rtt := ping(t, c); rtt < d || rtt >= d+slack {
		t.Fatalf("PING took %v with upstream latency %v, want [%v, %v)", rtt, d, d, d+slack)
	}
	p.SetUpstreamLatency(0)
	if rtt := ping(t, c); rtt >= slack {
		t.Fatalf("PING took %v after SetUpstreamLatency(0)", rtt)
	}
}

// TestJitterKeepsOrder sends commands as separate writes on a raw connection
// with jitter on and checks that the replies come back in order.
func TestJitterKeepsOrder(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	p.SetLatency(5 * time.Millisecond)
	p.SetJitter(20 * time.Millisecond)
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	const n = 50
	for i := range n {
		if _, err := fmt.Fprintf(conn, "ECHO %d\r\n", i); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(conn)
	for i := range n {
		var reply [2]string
		for j := range reply {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reply %d: %v", i, err)
			}
			reply[j] = strings.TrimSuffix(line, "\r\n")
		}
		if want := fmt.Sprint(i); reply[1] != want {
			t.Fatalf("reply %d is %q, want %q", i, reply, want)
		}
	}
}

// TestBlackhole checks that a blackholed command times out, that new
// connections hang too, and that Heal with ResetAll brings the client back.
func TestBlackhole(t *testing.T) {
	srv, p, c := setup(t, nil)
	ping(t, c)
	p.Blackhole()
	const timeout = 200 * time.Millisecond
	for _, cl := range []*redis.Client{c, client(t, p, srv, nil)} { // pooled, then new
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		start := time.Now()
		err := cl.Ping(ctx).Err()
		elapsed := time.Since(start)
		cancel()
		var ne net.Error
		if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
			t.Fatalf("PING into the blackhole: err %v, want a timeout", err)
		}
		t.Logf("PING into the blackhole: %v after %v", err, elapsed)
		if elapsed >= timeout+slack {
			t.Fatalf("PING into the blackhole took %v, with a %v deadline", elapsed, timeout)
		}
	}
	waitFor(t, "the new connection to be accepted", func() bool { return p.Conns() >= 2 })
	p.Heal()
	p.ResetAll()
	ping(t, c)
}

// TestResetAll checks that a command in flight fails with a connection error
// when the proxy resets its connection, and that the client reconnects.
func TestResetAll(t *testing.T) {
	srv, p, c := setup(t, func(o *redis.Options) { o.MaxRetries = -1 })
	ping(t, c)
	type result struct {
		err     error
		elapsed time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		err := c.BLPop(context.Background(), 10*time.Second, "faultproxy:empty").Err()
		done <- result{err, time.Since(start)}
	}()
	direct := srv.Client(t)
	waitFor(t, "BLPOP to block", func() bool {
		info, _ := direct.Info(ctxT(t, 5*time.Second), "clients").Result()
		return strings.Contains(info, "blocked_clients:1\r")
	})
	p.ResetAll()
	r := <-done
	// Over RESP3 go-redis reports the reset as io.EOF: it swallows the
	// ECONNRESET (TestResetAllSendsRST checks the RST on a raw connection).
	if !errors.Is(r.err, syscall.ECONNRESET) && !errors.Is(r.err, io.EOF) {
		t.Fatalf("BLPOP in flight during ResetAll: err %v, want a connection reset", r.err)
	}
	t.Logf("BLPOP during ResetAll: %v after %v", r.err, r.elapsed)
	if r.elapsed >= 5*time.Second {
		t.Fatalf("BLPOP took %v to fail", r.elapsed)
	}
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns() = %d after ResetAll, want 0", n)
	}
	waitFor(t, "the server to drop the reset connection", func() bool {
		info, _ := direct.Info(ctxT(t, 5*time.Second), "clients").Result()
		return strings.Contains(info, "connected_clients:1\r")
	})
	ping(t, c) // on a new connection
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns() = %d after reconnecting, want 1", n)
	}
}

// TestResetAllSendsRST checks on a raw connection that ResetAll aborts it
// with an RST, not a FIN.
func TestResetAllSendsRST(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.Start(t, srv.Addr)
	conn, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("BLPOP faultproxy:empty 10\r\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection to be proxied", func() bool { return p.Conns() == 1 })
	p.ResetAll()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 64)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after ResetAll: %v, want ECONNRESET", err)
	}
}

// TestCloseLeavesNothing closes a proxy with busy, delayed and blackholed
// connections and checks that no goroutine of it remains.
func TestCloseLeavesNothing(t *testing.T) {
	srv := redistest.Start(t) // the server's watcher goroutine predates the check
	ignore := goleak.IgnoreCurrent()
	p, err := faultproxy.New(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	opt := srv.Options()
	opt.Addr = p.Addr()
	opt.MaxRetries = -1
	busy, idle := redis.NewClient(opt), redis.NewClient(opt)
	for _, c := range []*redis.Client{busy, idle} {
		ping(t, c)
	}
	done := make(chan error, 1)
	go func() { done <- busy.BLPop(context.Background(), 10*time.Second, "faultproxy:empty").Err() }()
	direct := srv.Client(t)
	waitFor(t, "BLPOP to block", func() bool {
		info, _ := direct.Info(ctxT(t, 5*time.Second), "clients").Result()
		return strings.Contains(info, "blocked_clients:1\r")
	})
	p.SetLatency(time.Hour) // this PING is queued in the proxy, or dropped
	pingErr := make(chan error, 1)
	go func() { pingErr <- idle.Ping(context.Background()).Err() }()
	// More connections, each with a PING held back by the latency.
	for range 20 {
		conn, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "22 proxied connections", func() bool { return p.Conns() == 22 })
	p.Blackhole()

	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s: a goroutine of the proxy is stuck")
	}
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns() = %d after Close", n)
	}
	// A goroutine that has called wg.Done may still be on its way out when
	// Close returns: give the proxy's goroutines a moment to leave.
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(time.Second); ; {
		left := ""
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "faultproxy.(*") {
				left = g
			}
		}
		if left == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutine of the proxy left after Close:\n%s", left)
		}
		time.Sleep(time.Millisecond) // polling the runtime's goroutine list
	}
	if err := <-done; err == nil {
		t.Fatal("BLPOP succeeded through a closed proxy")
	}
	if err := <-pingErr; err == nil {
		t.Fatal("PING succeeded through a closed proxy")
	}
	_ = busy.Close()
	_ = idle.Close()
	_ = direct.Close()
	goleak.VerifyNone(t, ignore)
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
