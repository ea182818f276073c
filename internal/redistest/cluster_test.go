package redistest

import (
	"context"
	"testing"
	"time"
)

func TestClusterHarness(t *testing.T) {
	start := time.Now()
	c := StartCluster(t, 3, 1)
	t.Logf("3 masters + 3 replicas stable in %v", time.Since(start))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cc := c.Client(t)
	if err := cc.Set(ctx, "k{a}", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	m := c.MasterOf(t, "k{a}")
	if got, _ := c.plain(m).Get(ctx, "k{a}").Result(); got != "v" {
		t.Fatalf("key not on the master MasterOf names: got %q", got)
	}

	start = time.Now()
	n := c.Failover(t, m)
	t.Logf("failover %s -> %s in %v", m.Addr, n.Addr, time.Since(start))
	if c.MasterOf(t, "k{a}") != n {
		t.Fatalf("slot of k{a} not on the new master %s", n.Addr)
	}
	if got, err := cc.Get(ctx, "k{a}").Result(); got != "v" {
		t.Fatalf("after failover: %q, %v", got, err)
	}

	var to *Server
	for _, x := range c.Masters(t) {
		if x != n {
			to = x
			break
		}
	}
	start = time.Now()
	c.MoveSlot(t, c.Slot(t, "k{a}"), to)
	t.Logf("slot move in %v", time.Since(start))
	if c.MasterOf(t, "k{a}") != to {
		t.Fatalf("slot not moved")
	}
	if got, err := cc.Get(ctx, "k{a}").Result(); got != "v" {
		t.Fatalf("after slot move: %q, %v", got, err)
	}
	if got, _ := c.plain(to).Get(ctx, "k{a}").Result(); got != "v" {
		t.Fatalf("key not on the new owner: got %q", got)
	}
}
