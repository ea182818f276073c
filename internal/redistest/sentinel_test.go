package redistest

import (
	"context"
	"testing"
	"time"
)

func TestSentinelHarness(t *testing.T) {
	start := time.Now()
	s := StartSentinel(t)
	t.Logf("master, replica and 3 Sentinels ready in %v", time.Since(start))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fc := s.FailoverClient(t)
	if err := fc.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := s.Master
	start = time.Now()
	m := s.Failover(t)
	t.Logf("Sentinel failover %s -> %s, old master re-attached, in %v", old.Addr, m.Addr, time.Since(start))
	if s.Master != m || s.Replica != old {
		t.Fatalf("roles not swapped")
	}
	if got, _ := s.Admin(m).Get(ctx, "before").Result(); got != "1" {
		t.Fatalf("new master lacks the key written before the failover: %q", got)
	}
	// A new failover client asks the Sentinels and writes to the new master.
	if err := s.FailoverClient(t).Set(ctx, "after", "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Admin(m).Get(ctx, "after").Result(); got != "2" {
		t.Fatalf("write did not reach the new master: %q", got)
	}
}

func TestReplicaSetPromote(t *testing.T) {
	rs := StartReplicaSet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	for i := range 10 {
		if err := rs.Admin(rs.Master).Set(ctx, "k", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		rs.Admin(rs.Master).Do(ctx, "WAIT", 1, 1000)
		m := rs.Promote(t)
		if got, _ := rs.Admin(m).Get(ctx, "k").Int(); got != i {
			t.Fatalf("round %d: promoted replica has k=%d", i, got)
		}
		rs.Reattach(t)
	}
	t.Logf("10 promote+reattach rounds in %v", time.Since(start))
}
