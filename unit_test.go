package distlock

import (
	"container/heap"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis-free tests of the pure logic: key names and slots, grant decoding,
// globs, the renewal schedule, quorum decisions and backoff.

func TestKeySlot(t *testing.T) {
	// Values from CLUSTER KEYSLOT of redis-server 7.0.
	for key, want := range map[string]int{
		"foo": 12182, "bar": 5061, "{user1000}.following": 3443, "{user1000}.followers": 3443,
		"foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061, "": 0,
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestSlotTagsCoverEverySlot(t *testing.T) {
	for slot := range 16384 {
		tag := slotTag(slot)
		if tag == "" || keySlot("{"+tag+"}") != slot || strings.ContainsAny(tag, "{}") {
			t.Fatalf("slotTag(%d) = %q hashes to %d", slot, tag, keySlot("{"+tag+"}"))
		}
	}
	counter := slotCounter("distlock:")
	for _, name := range []string{"job", "order:1001", "a{b}c", "x}y"} {
		lock := "distlock:{" + name + "}"
		if keySlot(counter(lock)) != keySlot(lock) {
			t.Errorf("fence counter of %q is in another slot", lock)
		}
	}
}

// A Cluster key prefix is usable when every key of every lock under it has
// the same hash tag, the counter's included.
func TestClusterPrefix(t *testing.T) {
	for prefix, ok := range map[string]bool{
		"distlock:": true, "": true, "a}": true, "app{locks}:": true, "x{y}{z}": true,
		"app{": false, "a{b": false, "a{}": false, "a{}b{x}": false,
	} {
		if got := clusterPrefix(prefix); got != ok {
			t.Errorf("clusterPrefix(%q) = %v, want %v", prefix, got, ok)
		}
		if !ok {
			continue
		}
		for _, name := range []string{"k", "x{", "{}", "a}b"} {
			lock := prefix + "{" + name + "}"
			if slot := keySlot(lock); keySlot(slotCounter(prefix)(lock)) != slot || keySlot(lock+lineSuffix) != slot {
				t.Errorf("prefix %q, name %q: the lock's keys span slots", prefix, name)
			}
		}
	}
}

func TestKeyNames(t *testing.T) {
	c := &Client{prefix: "app:", id: "cid", counter: nodeCounter("app:")}
	n := c.names(mutexKind, "job")
	if n.lock != "app:{job}" || n.line != "app:{job}:line" || n.fence != "app:fence" ||
		n.channel() != "app:{job}:released" || n.inbox("cid") != "app:{job}:to:cid" || len(n.keys) != 3 {
		t.Fatalf("names %+v", n)
	}
	s := c.names(permitKind, "pool")
	if s.lock != "app:sem{pool}" || len(s.keys) != 5 || s.keys[3] != "app:sem{pool}:h" || s.keys[4] != "app:sem{pool}:d" {
		t.Fatalf("semaphore names %+v", s)
	}
	for _, k := range s.keys {
		if hashTag(k) != "pool" && k != "app:fence" {
			t.Errorf("%q is not under the tag {pool}", k)
		}
	}
}

func TestDecodeGrant(t *testing.T) {
	g, err := decodeGrant("42 1700000000000 t1,t2 1 5:job-7host=h pid=1")
	if err != nil || g.fence != 42 || g.since != 1700000000000 || len(g.holds) != 2 || !g.line ||
		g.owner != "job-7" || g.meta != "host=h pid=1" {
		t.Fatalf("decodeGrant: %+v, %v", g, err)
	}
	for _, bad := range []string{"", "x 1 t 0 0:", "1 1 t 0 9:short", "1 1  0 0:", "not a grant"} {
		if _, err := decodeGrant(bad); !errors.Is(err, errBadGrant) {
			t.Errorf("decodeGrant(%q): %v, want errBadGrant", bad, err)
		}
	}
}

func TestGlobEscape(t *testing.T) {
	if got := globEscape(`a*b?c[d]e\f`); got != `a\*b\?c\[d\]e\\f` {
		t.Fatalf("globEscape = %q", got)
	}
}

func TestParseKey(t *testing.T) {
	c := &Client{prefix: "distlock:"}
	for key, want := range map[string]listed{
		"distlock:{job}":         {"", "job"},
		"distlock:elect{boss}":   {"elect", "boss"},
		"distlock:rw{doc}":       {"rw", "doc"},
		"distlock:rw{doc}:h":     {"rw", "doc"},
		"distlock:sem{pool}:h":   {"sem", "pool"},
		"distlock:{a{b}c}":       {"", "a{b}c"},
		"distlock:{job}:line":    {},
		"distlock:sem{pool}:d":   {},
		"distlock:{job}:h":       {},
		"distlock:fence":         {},
		"distlock:fence:{x}":     {},
		"distlock:guard:{k}:k":   {},
		"other:{job}":            {},
		"distlock:unknown{name}": {},
	} {
		got, ok := c.parseKey(key)
		if ok != (want != listed{}) || got != want {
			t.Errorf("parseKey(%q) = %+v, %v; want %+v", key, got, ok, want)
		}
	}
}

func TestScheduleOrdersByNextEvent(t *testing.T) {
	base := time.Now()
	var s schedule
	locks := make([]*Lock, 5)
	for i, d := range []int{30, 10, 50, 20, 40} {
		locks[i] = &Lock{heapIdx: -1}
		s.at(locks[i], base.Add(time.Duration(d)*time.Millisecond))
	}
	s.at(locks[2], base.Add(5*time.Millisecond)) // rescheduled earlier
	var order []time.Duration
	for s.Len() > 0 {
		l := heap.Pop(&s).(*Lock)
		order = append(order, l.heapAt.Sub(base)/time.Millisecond)
		if l.heapIdx != -1 {
			t.Fatal("popped lock keeps its heap index")
		}
	}
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			t.Fatalf("pop order %v", order)
		}
	}
	if order[0] != 5 {
		t.Fatalf("the rescheduled lock was not first: %v", order)
	}
}

// renewAllAt brings forward the renewal of every held, renewing lock
// without a lease call in flight, and leaves the others where they were.
func TestRenewAllAtBringsRenewalsForward(t *testing.T) {
	base := time.Now()
	later := base.Add(10 * time.Second)
	var s schedule
	mk := func(l *Lock) *Lock {
		l.heapIdx, l.renewAt, l.valid = -1, later, later.Add(time.Second)
		s.at(l, later)
		return l
	}
	renews := mk(&Lock{state: held, renew: true})
	fixed := mk(&Lock{state: held})                                 // WithoutRenewal
	inFlight := mk(&Lock{state: held, renew: true, renewing: true}) // its answer will tell
	ended := mk(&Lock{state: released, renew: true})
	s.renewAllAt(base)
	if !renews.renewAt.Equal(base) || !renews.heapAt.Equal(base) {
		t.Fatalf("a renewing lock is due at %v (scheduled %v), want now", renews.renewAt.Sub(base), renews.heapAt.Sub(base))
	}
	for name, l := range map[string]*Lock{"fixed lease": fixed, "lease call in flight": inFlight, "released": ended} {
		if !l.renewAt.Equal(later) || !l.heapAt.Equal(later) {
			t.Errorf("%s moved to %v", name, l.heapAt.Sub(base))
		}
	}
	if heap.Pop(&s).(*Lock) != renews {
		t.Fatal("the lock brought forward is not first in the schedule")
	}
	if due := s.popDue(base, nil); len(due) != 0 {
		t.Fatalf("%d more locks due now", len(due))
	}
}

// A subscription that keeps breaking renews every lock at most once per
// renewAllGap.
func TestRenewAllIsRateLimited(t *testing.T) {
	r := &renewer{wake: make(chan struct{}, 1)}
	r.renewAll()
	if !r.rush {
		t.Fatal("the first renewAll was dropped")
	}
	r.rush = false
	r.renewAll()
	if r.rush {
		t.Fatal("a second renewAll within renewAllGap was taken")
	}
	r.rushed = r.rushed.Add(-renewAllGap)
	r.renewAll()
	if !r.rush {
		t.Fatal("a renewAll renewAllGap after the last was dropped")
	}
}

func TestNextBatchDropsEnded(t *testing.T) {
	queue := []*Lock{{state: held}, {state: released}, {state: held}}
	batch, rest := nextBatch(queue)
	if len(batch) != 2 || len(rest) != 0 {
		t.Fatalf("batch %d rest %d", len(batch), len(rest))
	}
}

func TestQuorumDecisions(t *testing.T) {
	q := &quorum{nodes: make([]redis.UniversalClient, 5)}
	yes := func(r nodeResult) bool { return r.err == nil }
	decided := q.decided(yes)
	res := func(states ...error) []nodeResult {
		out := make([]nodeResult, len(states))
		for i, e := range states {
			out[i].err = e
		}
		return out
	}
	no := errors.New("no")
	if decided(res(nil, nil, errPending, errPending, errPending)) {
		t.Error("decided with 2 of 5 yes")
	}
	if !decided(res(nil, nil, nil, errPending, errPending)) {
		t.Error("undecided with 3 of 5 yes")
	}
	if !decided(res(no, no, no, errPending, errPending)) {
		t.Error("undecided with 3 of 5 no")
	}
	if q.majority() != 3 {
		t.Errorf("majority of 5 = %d", q.majority())
	}
	start := time.Now()
	if q.outcome(3, 0, 0, start, time.Second) != extendDone || q.outcome(2, 3, 1, start, time.Second) != extendGone ||
		q.outcome(2, 1, 0, start, time.Second) != extendUndecided || q.outcome(0, 5, 3, start, time.Second) != extendTaken {
		t.Error("quorum outcomes")
	}
	if q.outcome(3, 0, 0, start.Add(-2*time.Second), time.Second) == extendDone {
		t.Error("a majority that answered after the lease counted")
	}
}

// reentryFence: a reentry decides on the fence a majority reports; grants
// that found the lock free on a majority are a new grant, whatever a
// minority's copy of an earlier hold of the owner says.
func TestQuorumReentryFence(t *testing.T) {
	grant := func(fence, holds int64) nodeResult { return nodeResult{val: []int64{1, fence, holds}} }
	pending := nodeResult{err: errPending}
	for _, c := range []struct {
		name    string
		res     []nodeResult
		reentry bool
		fence   int64
	}{
		{"held by its owner on a majority", []nodeResult{grant(7, 2), grant(7, 2), grant(9, 1)}, true, 7},
		{"a late node's own fence", []nodeResult{grant(7, 2), grant(8, 2), pending}, true, 0},
		{"an earlier hold left on one node", []nodeResult{grant(7, 2), grant(9, 1), grant(8, 1)}, false, 0},
		{"fresh grants too few yet", []nodeResult{grant(7, 2), grant(9, 1), pending}, true, 0},
		{"new grants only", []nodeResult{grant(9, 1), grant(9, 1), pending}, false, 0},
	} {
		reentry, fence := reentryFence(c.res, 2)
		if reentry != c.reentry || reentry && fence != c.fence { // (no reentry: the fence is not used)
			t.Errorf("%s: reentry %v, fence %d; want %v, %d", c.name, reentry, fence, c.reentry, c.fence)
		}
	}
}

func TestQuorumBackoffAndWaits(t *testing.T) {
	for n := 1; n < 20; n++ {
		d := quorumBackoff(n)
		hi := min(time.Millisecond<<min(n-1, 7), 100*time.Millisecond)
		if d < hi/2 || d > hi {
			t.Errorf("quorumBackoff(%d) = %v, want in [%v, %v]", n, d, hi/2, hi)
		}
	}
	for ttl, want := range map[time.Duration]time.Duration{
		100 * time.Millisecond: 50 * time.Millisecond, 2 * time.Second: 200 * time.Millisecond, time.Minute: time.Second,
	} {
		if got := decisionWait(ttl); got != want {
			t.Errorf("decisionWait(%v) = %v, want %v", ttl, got, want)
		}
	}
}

func TestDrift(t *testing.T) {
	if got := drift(10 * time.Second); got != 102*time.Millisecond {
		t.Fatalf("drift(10s) = %v", got)
	}
}

func TestReplyDecoding(t *testing.T) {
	for reply, want := range map[string]releaseOutcome{"-1": releaseGone, "-2": releaseTaken, "2": releaseHoldsLeft, "0": releaseFreed, "0,7": releaseHandedOver} {
		var res []int64
		for _, f := range strings.Split(reply, ",") {
			var v int64
			for i, ch := range f {
				if ch == '-' && i == 0 {
					continue
				}
				v = v*10 + int64(ch-'0')
			}
			if f[0] == '-' {
				v = -v
			}
			res = append(res, v)
		}
		if got := releaseReply(res); got != want {
			t.Errorf("releaseReply(%v) = %v, want %v", res, got, want)
		}
	}
	if extendReply(1, false) != extendUnacked || extendReply(1, true) != extendDone || extendReply(-1, true) != extendTaken || extendReply(0, true) != extendGone {
		t.Error("extendReply")
	}
}

func TestTryGrant(t *testing.T) {
	defer func(f func() int64) { nowMillis = f }(nowMillis)
	nowMillis = func() int64 { return 1763870000123 }
	if got, want := tryGrant("tok", "0:host=a pid=1"), "1763870000123 tok 0 0:host=a pid=1"; got != want {
		t.Fatalf("tryGrant = %q, want %q", got, want)
	}
}

func TestScriptReplies(t *testing.T) {
	reply := func(v any) *redis.Cmd {
		cmd := redis.NewCmd(t.Context())
		cmd.SetVal(v)
		return cmd
	}
	for _, c := range []struct {
		v         any
		ints, try string
	}{
		{int64(7), "[7]", "[1 7 1]"},
		{[]any{int64(0), int64(250)}, "[0 250]", "[0 250]"},
		{[]any{int64(1), int64(7), int64(1), int64(1)}, "[1 7 1 1]", "[1 7 1 1]"},
	} {
		got, err := int64s(reply(c.v), nil)
		if err != nil || fmt.Sprint(got) != c.ints {
			t.Errorf("int64s(%v) = %v, %v; want %s", c.v, got, err, c.ints)
		}
		got, err = tryReply(reply(c.v), nil)
		if err != nil || fmt.Sprint(got) != c.try {
			t.Errorf("tryReply(%v) = %v, %v; want %s", c.v, got, err, c.try)
		}
	}
	for _, v := range []any{"OK", []any{int64(1), "x"}} {
		if got, err := int64s(reply(v), nil); err == nil {
			t.Errorf("int64s(%v) = %v, want an error", v, got)
		}
	}
}

// A pattern is sealed unless a "[" is left open or a "\" escapes nothing.
func TestGlobSealed(t *testing.T) {
	for p, want := range map[string]bool{
		"": true, "a*": true, `a\*`: true, `a\\`: true, "[ab]": true, "[^]]x": true, `[\]]`: true, "[]": true,
		`a\`: false, `\`: false, "[": false, "[ab": false, "[^": false, "[a-]": false, `[\]`: false, "a[b-]c": false,
	} {
		if got := globSealed(p); got != want {
			t.Errorf("globSealed(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestLateRenewal covers what a renewal that Redis refused for its guard
// does to the Lock: the answer bounds the lease within one round trip, so
// the lock keeps it and retries at once while a retry can pass its guard,
// and otherwise runs out at its deadline.
func TestLateRenewal(t *testing.T) {
	const ttl = 3 * time.Second
	now := time.Now()
	fresh := func() *Lock {
		// a grant handed over after a long wait: the lease is known only
		// within 2s, and its first lease (span) is the handoff's 2s
		return &Lock{ttl: ttl, state: held, renew: true, renewing: true, heapIdx: -1,
			valid: now.Add(100 * time.Millisecond), slack: 2 * time.Second, span: 2 * time.Second, renewAt: now}
	}
	if g := fresh().guard(); g != (2*time.Second + drift(2*time.Second)).Milliseconds() {
		t.Fatalf("guard %dms, want the slack plus one drift of the lease in force", g)
	}

	l := fresh()
	start := now.Add(-10 * time.Millisecond)
	l.applyRenewal(renewResult{l: l, start: start, ttl: ttl, out: extendLate, left: 1500 * time.Millisecond})
	if want := start.Add(1500*time.Millisecond - drift(1500*time.Millisecond)); !l.valid.Equal(want) || l.state != held {
		t.Fatalf("after a late answer with 1.5s left: valid %v, state %v; want %v, held", l.valid.Sub(now), l.state, want.Sub(now))
	}
	if l.slack >= time.Second || l.guard() >= 1500 {
		t.Fatalf("slack %v, guard %dms: the answer's round trip should bound the lease", l.slack, l.guard())
	}
	if l.renewAt.After(time.Now()) || l.renewing {
		t.Fatalf("renewAt in %v, renewing %v: a retry that can pass should go out at once", time.Until(l.renewAt), l.renewing)
	}
	if !strings.Contains(fmt.Sprint(l.lastErr), "1.5s of the lease left") {
		t.Fatalf("lastErr %v", l.lastErr)
	}

	l = fresh()
	l.applyRenewal(renewResult{l: l, start: start, ttl: ttl, out: extendLate, left: 20 * time.Millisecond})
	if want := start.Add(20*time.Millisecond - drift(20*time.Millisecond)); !l.valid.Equal(want) || !l.renewAt.Equal(l.valid) || l.state != held {
		t.Fatalf("after a late answer with 20ms left: valid %v, renewAt %v, state %v; want %v, the answer's bound, and no retry before it",
			l.valid.Sub(now), l.renewAt.Sub(now), l.state, want.Sub(now))
	}

	// A lease that Redis says is shorter than the lock's deadline (a
	// restart from a snapshot brought an older lease back) lowers it.
	l = fresh()
	l.valid = now.Add(10 * time.Minute)
	l.applyRenewal(renewResult{l: l, start: start, ttl: ttl, out: extendLate, left: 1500 * time.Millisecond})
	if want := start.Add(1500*time.Millisecond - drift(1500*time.Millisecond)); !l.valid.Equal(want) {
		t.Fatalf("after a late answer with 1.5s left of a lock valid for 10m: valid %v, want %v", l.valid.Sub(now), want.Sub(now))
	}
}
