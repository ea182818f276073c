package fence_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// exampleAddr is the redis-server that TestMain starts for the examples.
var exampleAddr string

func TestMain(m *testing.M) {
	os.Exit(redistest.RunMain(m, func(addr string) { exampleAddr = addr }))
}

func setup(t *testing.T) (*distlock.Client, *redis.Client, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c := distlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	return c, rdb, srv
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestGuardSet(t *testing.T) {
	_, rdb, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	g := fence.NewGuard(rdb)
	steps := []struct {
		fence int64
		value string
		stale bool
	}{
		{5, "a", false},
		{5, "b", false}, // the same holder writes again
		{4, "stale", true},
		{7, "c", false},
		{6, "stale", true},
		{5, "stale", true},
		{7, "d", false},
	}
	want := ""
	for _, s := range steps {
		err := g.Set(ctx, s.fence, "report", s.value, 0)
		if s.stale != errors.Is(err, fence.ErrStale) || (!s.stale && err != nil) {
			t.Fatalf("Set fence %d: %v, want stale=%v", s.fence, err, s.stale)
		}
		if !s.stale {
			want = s.value
		}
		if got, _ := rdb.Get(ctx, "report").Result(); got != want {
			t.Fatalf("after Set fence %d: report = %q, want %q", s.fence, got, want)
		}
	}
	marker, _ := fence.Marker("report")
	if high, _ := rdb.Get(ctx, marker).Int64(); high != 7 {
		t.Fatalf("marker %s = %d, want 7", marker, high)
	}
	if ttl := rdb.PTTL(ctx, marker).Val(); ttl != -1 {
		t.Fatalf("marker has a TTL (%v); it must never expire", ttl)
	}

	// An expiring value: the marker outlives it and still refuses stale writers.
	if err := g.Set(ctx, 8, "report", "e", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, "report").Val(); ttl < 59*time.Second || ttl > time.Minute {
		t.Fatalf("TTL of report = %v, want ~1m", ttl)
	}
	rdb.Del(ctx, "report")
	if err := g.Set(ctx, 7, "report", "stale", 0); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale Set after the key was deleted: %v", err)
	}
	if n := rdb.Exists(ctx, "report").Val(); n != 0 {
		t.Fatal("stale Set recreated the deleted key")
	}
}

func TestGuardHSetFencesTheWholeHash(t *testing.T) {
	_, rdb, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	g := fence.NewGuard(rdb)
	if err := g.HSet(ctx, 3, "account:7", "balance", 100); err != nil {
		t.Fatal(err)
	}
	if err := g.HSet(ctx, 2, "account:7", "owner", "mallory"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale HSet of another field: %v", err)
	}
	if err := g.HSet(ctx, 3, "account:7", "owner", "alice"); err != nil {
		t.Fatal(err)
	}
	got := rdb.HGetAll(ctx, "account:7").Val()
	if len(got) != 2 || got["balance"] != "100" || got["owner"] != "alice" {
		t.Fatalf("account:7 = %v", got)
	}
}

func TestGuardRun(t *testing.T) {
	_, rdb, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	g := fence.NewGuard(rdb)
	// The body sees the caller's KEYS and ARGV, not the marker and fence.
	debit := fence.NewScript(`
local balance = tonumber(redis.call('GET', KEYS[1]) or '0')
if balance < tonumber(ARGV[1]) then
  return redis.error_reply('INSUFFICIENT ' .. balance)
end
redis.call('RPUSH', KEYS[2], ARGV[1])
return redis.call('DECRBY', KEYS[1], ARGV[1])`)
	keys := []string{"{acct:9}:balance", "{acct:9}:debits"}
	rdb.Set(ctx, keys[0], 100, 0)

	if n, err := g.Run(ctx, debit, 10, keys, 30).Int64(); err != nil || n != 70 {
		t.Fatalf("debit with fence 10: %d, %v", n, err)
	}
	if _, err := g.Run(ctx, debit, 9, keys, 30).Int64(); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("debit with fence 9: %v, want ErrStaleFence", err)
	}
	// A body that fails does not advance the marker.
	if _, err := g.Run(ctx, debit, 12, keys, 500).Result(); err == nil || !strings.HasPrefix(err.Error(), "INSUFFICIENT") {
		t.Fatalf("overdraft: %v, want the body's own error", err)
	}
	if n, err := g.Run(ctx, debit, 11, keys, 20).Int64(); err != nil || n != 50 {
		t.Fatalf("debit with fence 11 after a failed fence-12 call: %d, %v", n, err)
	}
	if got := rdb.LRange(ctx, keys[1], 0, -1).Val(); strings.Join(got, ",") != "30,20" {
		t.Fatalf("debits = %v, want [30 20]", got)
	}
	// A body that returns nothing gives redis.Nil, as with go-redis scripts.
	noop := fence.NewScript(`redis.call('GET', KEYS[1])`)
	if err := g.Run(ctx, noop, 11, keys).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("nil-returning body: %v", err)
	}
}

func TestGuardComparesHugeFencesExactly(t *testing.T) {
	_, rdb, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	g := fence.NewGuard(rdb)
	const big = int64(1)<<53 + 1 // not representable as a Lua (double) number
	if err := g.Set(ctx, big, "k", "v", 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Set(ctx, big-1, "k", "stale", 0); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("fence 2^53 after 2^53+1: %v, want ErrStaleFence", err)
	}
	if err := g.Set(ctx, 999, "k", "stale", 0); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("shorter fence: %v, want ErrStaleFence", err)
	}
}

func TestGuardBadInput(t *testing.T) {
	_, rdb, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	g := fence.NewGuard(rdb)
	script := fence.NewScript(`return 1`)
	var nilClient *redis.Client
	var noCtx context.Context // a nil ctx: refused, not handed to go-redis (which panics on it)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"zero fence", g.Set(ctx, 0, "k", "v", 0), distlock.ErrInvalidOption},
		{"negative fence", g.HSet(ctx, -1, "k", "f", "v"), distlock.ErrInvalidOption},
		{"empty key", g.Set(ctx, 1, "", "v", 0), distlock.ErrInvalidKey},
		{"untaggable key", g.Set(ctx, 1, "a}b", "v", 0), distlock.ErrInvalidKey},
		{"negative ttl", g.Set(ctx, 1, "k", "v", -time.Second), distlock.ErrInvalidTTL},
		{"sub-ms ttl", g.Set(ctx, 1, "k", "v", time.Microsecond), distlock.ErrInvalidTTL},
		{"no keys", g.Run(ctx, script, 1, nil).Err(), distlock.ErrInvalidOption},
		{"nil script", g.Run(ctx, nil, 1, []string{"k"}).Err(), distlock.ErrInvalidOption},
		{"zero script", g.Run(ctx, new(fence.Script), 1, []string{"k"}).Err(), distlock.ErrInvalidOption}, // (panicked before)
		{"nil client", fence.NewGuard(nil).Set(ctx, 1, "k", "v", 0), distlock.ErrNilClient},
		{"typed nil client", fence.NewGuard(nilClient).HSet(ctx, 1, "k", "f", "v"), distlock.ErrNilClient},
		{"nil ctx Set", g.Set(noCtx, 1, "k", "v", 0), distlock.ErrNilContext},
		{"nil ctx HSet", g.HSet(noCtx, 1, "k", "f", "v"), distlock.ErrNilContext},
		{"nil ctx Run", g.Run(noCtx, script, 1, []string{"k"}).Err(), distlock.ErrNilContext},
		{"unencodable Set value", g.Set(ctx, 1, "k", struct{ A int }{1}, 0), distlock.ErrInvalidOption},
		{"unencodable HSet value", g.HSet(ctx, 1, "k", "f", []string{"a"}), distlock.ErrInvalidOption},
		{"unencodable Run arg", g.Run(ctx, script, 1, []string{"k"}, map[string]int{"a": 1}).Err(), distlock.ErrInvalidOption},
	}
	for _, tc := range cases {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("bad input wrote %d keys", n)
	}
}

func TestFenceMarker(t *testing.T) {
	cases := map[string]string{
		"report":         "distlock:guard:{report}:report",
		"user:{42}:name": "distlock:guard:{42}:user:{42}:name",
		"a{b":            "distlock:guard:{a{b}:a{b", // no '}': whole key hashed
		"{x}{y}":         "distlock:guard:{x}:{x}{y}",
	}
	for key, want := range cases {
		if got, err := fence.Marker(key); got != want || err != nil {
			t.Errorf("FenceMarker(%q) = %q, %v; want %q", key, got, err, want)
		}
	}
	// An empty tag makes Redis hash the whole key, '}' included; no marker
	// name can have that as its tag.
	for _, key := range []string{"", "{}x", "a}b", "x{}{y}"} {
		if got, err := fence.Marker(key); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("FenceMarker(%q) = %q, %v; want ErrInvalidKey", key, got, err)
		}
	}
}

// TestGuardOnCluster runs the guard on a real (single-node) Redis Cluster,
// which refuses a script whose keys are in different slots: the marker must
// share its key's slot for every shape of key.
func TestGuardOnCluster(t *testing.T) {
	srv := redistest.Start(t, "--cluster-enabled", "yes")
	ctx := ctxT(t, 10*time.Second)
	admin := srv.Client(t)
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(admin.ClusterInfo(ctx).Val(), "cluster_state:ok") {
		if ctx.Err() != nil {
			t.Fatal("cluster never reached state ok")
		}
		time.Sleep(10 * time.Millisecond) // polling the server's cluster state
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	g := fence.NewGuard(cc)
	script := fence.NewScript(`return redis.call('INCR', KEYS[1])`)
	for _, key := range []string{"report", "user:{42}:name", "a{b", "{x}{y}", "order:1001"} {
		marker, err := fence.Marker(key)
		if err != nil {
			t.Fatal(err)
		}
		ks, ms := admin.ClusterKeySlot(ctx, key).Val(), admin.ClusterKeySlot(ctx, marker).Val()
		if ks != ms {
			t.Errorf("slot of %q is %d, slot of its marker %q is %d", key, ks, marker, ms)
		}
		if err := g.Set(ctx, 2, key, "v", 0); err != nil {
			t.Errorf("cluster Set %q: %v", key, err)
		}
		if err := g.Set(ctx, 1, key, "v", 0); !errors.Is(err, fence.ErrStale) {
			t.Errorf("cluster stale Set %q: %v", key, err)
		}
		if err := g.HSet(ctx, 2, "h"+key, "f", "v"); err != nil {
			t.Errorf("cluster HSet %q: %v", "h"+key, err)
		}
		if err := g.Run(ctx, script, 2, []string{"n" + key}).Err(); err != nil {
			t.Errorf("cluster Run %q: %v", "n"+key, err)
		}
	}
}

// README: "Lock.Fence() is strictly greater than the fence of every earlier
// grant of the lock"; docs/deployments.md, single node: "Fences strictly
// increase | yes, a restart without persistence included ... unless the
// clock goes back"; fence/guard.go: a Guard returns ErrStale to "a holder
// that was paused past its lease".
//
// Redis with its default RDB snapshots (save 3600 1 300 100 60 10000)
// crashes and restarts: it reloads its last snapshot, in which the fence
// counter exists but is behind the fences granted since. Before the
// counter was lifted on a script reload, the next grant repeated a fence
// already handed out, and the guard accepted the stale holder's write after
// the new holder's, overwriting it.
func TestGuardRefusesStaleHolderAfterRestartFromSnapshot(t *testing.T) {
	srv := redistest.Start(t, "--save", "3600 1 300 100 60 10000")
	ctx := ctxT(t, 30*time.Second)
	key := "report:q4"

	c1 := distlock.New(srv.Client(t))
	defer c1.Close()
	first, err := c1.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// A periodic snapshot happens here (what "save 60 10000" etc. do).
	if err := srv.Client(t).Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	// Holder A gets the lock, writes through the guard, then is paused.
	a, err := c1.Lock(ctx, key, distlock.WithTTL(time.Second), distlock.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	g1 := fence.NewGuard(srv.Client(t))
	if err := g1.Set(ctx, a.Fence(), key+":body", "A", 0); err != nil {
		t.Fatal(err)
	}

	// Redis crashes (SIGKILL) and restarts from its snapshot.
	srv.Restart(t)

	// Holder B takes the lock and writes.
	rdb2 := srv.Client(t)
	c2 := distlock.New(rdb2)
	defer c2.Close()
	b, err := c2.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	g2 := fence.NewGuard(rdb2)
	if err := g2.Set(ctx, b.Fence(), key+":body", "B", 0); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	// A resumes and writes what it computed before the pause.
	errA := g2.Set(ctx, a.Fence(), key+":body", "A-stale", 0)
	body := rdb2.Get(ctx, key+":body").Val()
	if b.Fence() <= a.Fence() || !errors.Is(errA, fence.ErrStale) {
		t.Fatalf("after a restart from an RDB snapshot: A's fence %d, B's (later) fence %d; "+
			"A's stale guarded write returned %v and the body is %q (B's write overwritten)",
			a.Fence(), b.Fence(), errA, body)
	}
}

func ExampleGuard() {
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()
	guard := fence.NewGuard(rdb)
	ctx := context.Background()

	// A holder whose lease ran out (it was paused, say) ...
	stale, _ := locks.TryLock(ctx, "report:q3", distlock.WithTTL(50*time.Millisecond), distlock.WithoutRenewal())
	<-stale.Lost()
	// ... while the next holder took the lock and wrote the report.
	next, err := locks.Lock(ctx, "report:q3")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer next.Release(ctx)
	fmt.Println(guard.Set(ctx, next.Fence(), "report:q3:body", "fresh", 0))

	err = guard.Set(ctx, stale.Fence(), "report:q3:body", "stale", 0)
	fmt.Println(errors.Is(err, fence.ErrStale))
	fmt.Println(rdb.Get(ctx, "report:q3:body").Val())
	// Output:
	// <nil>
	// true
	// fresh
}
