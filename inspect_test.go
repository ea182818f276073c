package distlock_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

func TestInspectHeldAndFree(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	before := time.Now().Add(-time.Second) // holder clock = ours, ms precision
	l, err := c.TryLock(ctx, "job", distlock.WithTTL(5*time.Second), distlock.WithMetadata("host=h1 pid=42"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	sub := rdb.Subscribe(ctx, "distlock:{job}:released")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription confirmation
		t.Fatal(err)
	}
	rdb.RPush(ctx, "distlock:{job}:line", "w1", "w2")

	info, err := c.Inspect(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held() || info.Key != "job" || info.Owner != l.Token() || info.Fence != l.Fence() ||
		info.Count != 1 || info.Meta != "host=h1 pid=42" {
		t.Fatalf("Inspect = %+v, want held by %s fence %d", info, l.Token(), l.Fence())
	}
	if info.TTL <= 0 || info.TTL > 5*time.Second {
		t.Fatalf("TTL %v, want in (0, 5s]", info.TTL)
	}
	if info.Since.Before(before) || info.Since.After(time.Now()) {
		t.Fatalf("Since %v, want about now", info.Since)
	}
	if info.Queued != 2 || info.Listening != 1 {
		t.Fatalf("Queued %d Listening %d, want 2 and 1", info.Queued, info.Listening)
	}

	free, err := c.Inspect(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	if free.Held() || free.Key != "other" || free.Fence != 0 || free.TTL != 0 {
		t.Fatalf("Inspect of a free lock = %+v", free)
	}
	if _, err := c.Inspect(ctx, ""); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Fatalf("Inspect(\"\"): %v, want ErrInvalidKey", err)
	}
}

func TestInspectReentrantCount(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	for range 3 {
		if _, err := c.TryLock(ctx, "re", distlock.WithOwner("worker-7")); err != nil {
			t.Fatal(err)
		}
	}
	info, err := c.Inspect(ctx, "re")
	if err != nil {
		t.Fatal(err)
	}
	if info.Owner != "worker-7" || info.Count != 3 {
		t.Fatalf("owner %q count %d, want worker-7 and 3", info.Owner, info.Count)
	}
}

func TestListMatchesLocksOnly(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	for _, k := range []string{"job:a", "job:b", "backup", "job:c"} {
		if _, err := c.TryLock(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	l, err := c.TryLock(ctx, "job:gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, "distlock:{job:string}", "not a lock", 0)
	rdb.RPush(ctx, "distlock:{job:a}:line", "w")
	rdb.HSet(ctx, "distlock:{job:hash}", "owner", "o")
	rdb.Set(ctx, "other:{job:x}", "1 1 t 0 0:", 0) // another prefix

	got := func(pattern string) string {
		t.Helper()
		infos, err := c.List(ctx, pattern)
		if err != nil {
			t.Fatal(err)
		}
		names := make([]string, len(infos))
		for i, in := range infos {
			if !in.Held() || in.Fence == 0 {
				t.Fatalf("List returned %+v", in)
			}
			names[i] = in.Key
		}
		return strings.Join(names, ",")
	}
	if s := got("job:*"); s != "job:a,job:b,job:c" {
		t.Fatalf("List(job:*) = %s", s)
	}
	if s := got(""); s != "backup,job:a,job:b,job:c" {
		t.Fatalf("List(\"\") = %s", s)
	}
	if s := got("nothing*"); s != "" {
		t.Fatalf("List(nothing*) = %s", s)
	}
}

// List returns the names that match its pattern, of every kind, and no
// other: SCAN's match on whole keys also let through names with braces
// that merely contain a match ("b{a" and "a}x" for "a"), and missed names
// that a pattern with a trailing "\\" or an unclosed "[" matches.
func TestListMatchesWholeNames(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	for _, k := range []string{"a", "a}x", `a\`, "[a"} {
		if _, err := c.TryLock(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	e, _ := c.NewElection("b{a")
	if _, err := e.Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	rw, _ := c.NewRWMutex("x{a}y")
	if _, err := rw.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	s, _ := c.NewSemaphore("ab", 2)
	if _, err := s.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	for pattern, want := range map[string]string{
		"a":       "a/lock",
		"a*":      `a/lock a\/lock ab/permit a}x/lock`,
		"*a":      "[a/lock a/lock b{a/leader",
		"?{a*":    "b{a/leader x{a}y/read",
		`a\`:      `a\/lock`, // a trailing "\" is a backslash
		`a\\`:     `a\/lock`,
		"[a":      "a/lock", // an unclosed class runs to the end
		`\[a`:     "[a/lock",
		"[^a]{a*": "b{a/leader x{a}y/read",
		"a}":      "",
	} {
		infos, err := c.List(ctx, pattern)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, in := range infos {
			got = append(got, in.Key+"/"+in.Kind)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("List(%q) = %q, want %q", pattern, strings.Join(got, " "), want)
		}
	}
}

func TestListManyLocks(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 20*time.Second)
	const n = 2500 // more than one SCAN page
	var locks []*distlock.Lock
	for i := range n {
		l, err := c.TryLock(ctx, fmt.Sprintf("bulk:%04d", i), distlock.WithoutRenewal(), distlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	defer func() {
		for _, l := range locks {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 1 || keys[0] != "distlock:fence" {
			t.Fatalf("left in Redis after the releases: %.10v (%d keys), want the fence counter only", keys, len(keys))
		}
	}()
	infos, err := c.List(ctx, "bulk:*")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != n || infos[0].Key != "bulk:0000" || infos[n-1].Key != fmt.Sprintf("bulk:%04d", n-1) {
		t.Fatalf("List returned %d locks, want %d sorted", len(infos), n)
	}
}

func TestForceRelease(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	l, err := c.TryLock(ctx, "stuck", distlock.WithTTL(900*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	sub := rdb.Subscribe(ctx, "distlock:{stuck}:released")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	removed, err := c.ForceRelease(ctx, "stuck", 0)
	if err != nil {
		t.Fatal(err)
	}
	if removed.Owner != l.Token() || removed.Fence != l.Fence() || removed.TTL <= 0 {
		t.Fatalf("ForceRelease returned %+v", removed)
	}
	if n := rdb.Exists(ctx, "distlock:{stuck}").Val(); n != 0 {
		t.Fatal("lock hash still exists")
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatalf("waiters not told: %v", err)
	}
	if msg.Payload != "r" {
		t.Fatalf("release notice %q, want \"r\" (free)", msg.Payload)
	}
	// The holder learns at its next renewal, a third of the TTL later.
	select {
	case <-l.Lost():
		if !errors.Is(l.Err(), distlock.ErrLost) {
			t.Fatalf("Err = %v", l.Err())
		}
	case <-time.After(2 * time.Second):
		t.Fatal("holder did not see the forced release")
	}
	if _, err := c.TryLock(ctx, "stuck"); err != nil {
		t.Fatalf("lock not free after ForceRelease: %v", err)
	}
	if _, err := c.ForceRelease(ctx, "free", 0); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("ForceRelease of a free lock: %v, want ErrNotHeld", err)
	}
}

func TestForceReleaseGrantChecksFence(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 5*time.Second)
	l, err := c.TryLock(ctx, "grant")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.ForceRelease(ctx, "grant", l.Fence()+1)
	if !errors.Is(err, distlock.ErrNotHeld) || info.Fence != l.Fence() {
		t.Fatalf("ForceReleaseGrant with another fence: %+v, %v; want ErrNotHeld and the current holder", info, err)
	}
	if now, _ := c.Inspect(ctx, "grant"); now.Fence != l.Fence() {
		t.Fatalf("lock changed: %+v", now)
	}
	if _, err := c.ForceRelease(ctx, "grant", l.Fence()); err != nil {
		t.Fatal(err)
	}
	if now, _ := c.Inspect(ctx, "grant"); now.Held() {
		t.Fatalf("still held: %+v", now)
	}
	if _, err := c.ForceRelease(ctx, "grant", -1); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("fence 0: %v, want ErrInvalidOption", err)
	}
}

// TestForceReleaseHandsToFairWaiter: a forced release frees the lock like a
// release does, so the first fair-mode waiter gets it at once.
func TestForceReleaseHandsToFairWaiter(t *testing.T) {
	c, _, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	holder, err := c.TryLock(ctx, "fair", distlock.WithTTL(time.Minute), distlock.WithFair())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *distlock.Lock, 1)
	go func() {
		l, err := c.Lock(ctx, "fair", distlock.WithFair())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := c.Inspect(ctx, "fair")
		if err != nil {
			t.Fatal(err)
		}
		if info.Queued == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiter never queued: %+v", info)
		}
		time.Sleep(5 * time.Millisecond) // polling for the waiter to line up
	}
	if _, err := c.ForceRelease(ctx, "fair", 0); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil || l.Fence() <= holder.Fence() {
			t.Fatalf("waiter got %v", l)
		}
	case <-time.After(3 * time.Second): // the holder's lease had a minute left
		t.Fatal("fair waiter not handed the lock")
	}
}

// List matches names and prefixes byte for byte: a prefix (or name) that
// is not UTF-8 is quoted for SCAN as it is, not rune by rune, which made
// its invalid bytes U+FFFD and the pattern match nothing.
func TestListWithNonUTF8Prefix(t *testing.T) {
	_, rdb, _ := setup(t)
	c := distlock.New(rdb, distlock.WithKeyPrefix("l\xe9:"))
	t.Cleanup(func() { c.Close() })
	ctx := ctxT(t, 10*time.Second)
	if _, err := c.TryLock(ctx, "caf\xe9"); err != nil {
		t.Fatal(err)
	}
	for _, pattern := range []string{"*", "caf\xe9"} {
		if infos, err := c.List(ctx, pattern); err != nil || len(infos) != 1 {
			t.Fatalf("List(%q) with the lock held: %v, %v", pattern, infos, err)
		}
	}
}

// Listening counts the connections subscribed to a lock's release channel,
// and a quorum Client stays subscribed after its wait (an idle channel, see
// design.md "Subscriptions"): once it took the lock and released it, a free
// lock with nobody waiting still counts it. cli.md says so for WAITERS and
// "(N waiting)", which add Listening to Queued; they claimed to count the
// processes waiting only.
func TestListeningCountsAQuorumClientAfterItsWait(t *testing.T) {
	_, a, b := quorumSetup(t, 3)
	ctx := ctxT(t, 20*time.Second)
	l, err := a.TryLock(ctx, "job")
	must(t, err)
	got := make(chan error, 1)
	go func() {
		w, err := b.Lock(ctx, "job")
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	for info, err := a.Inspect(ctx, "job"); info.Listening == 0; info, err = a.Inspect(ctx, "job") {
		must(t, err)
		time.Sleep(5 * time.Millisecond) // polling another Client's progress
	}
	must(t, l.Release(ctx))
	must(t, <-got)
	// Release returns once a majority freed the lock; Inspect reads the
	// first node, whose delete may still be on its way.
	info, err := a.Inspect(ctx, "job")
	for ; err == nil && info.Held() && ctx.Err() == nil; info, err = a.Inspect(ctx, "job") {
		time.Sleep(5 * time.Millisecond) // polling the node's own progress
	}
	must(t, err)
	if info.Held() || info.Queued != 0 || info.Listening != 1 {
		t.Fatalf("after the waiter took the lock and released it: %+v, want free, Listening 1 (its idle subscription)", info)
	}
}

// ForceRelease leaves as it is every value that List skips as no lock's,
// not only those with no grant's first fields: a value shaped like a grant
// up to its tail ("<fence> <since> <holds> <line> " and text without the
// owner's length) was freed by the script, which checked those fields
// only, and ForceRelease then failed with "not a distlock grant" (exit 69
// for release --force) with the value gone.
func TestForceReleaseLeavesValuesListSkips(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	for i, value := range []string{
		"12 34 abc 0 text of another application",
		"12 34 abc 1 9:short",
		"99999999999999999999 34 abc 0 0:",
	} {
		name := fmt.Sprintf("other%d", i)
		key := "distlock:{" + name + "}"
		if err := rdb.Set(ctx, key, value, 0).Err(); err != nil {
			t.Fatal(err)
		}
		infos, err := c.List(ctx, name)
		if err != nil || len(infos) != 0 {
			t.Fatalf("List of %q: %+v, %v; want it skipped", value, infos, err)
		}
		if _, err := c.ForceRelease(ctx, name, 0); !errors.Is(err, distlock.ErrNotHeld) {
			t.Errorf("ForceRelease of %q: %v, want ErrNotHeld", value, err)
		}
		if got, _ := rdb.Get(ctx, key).Result(); got != value {
			t.Errorf("after ForceRelease %q is %q, want %q", key, got, value)
		}
	}
}
