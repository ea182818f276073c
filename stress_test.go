package distlock_test

// A stress test: many goroutines and several Clients on the
// same and different lock names at once, with a mix of Lock (fair, and
// reentrant WithOwner holds), TryLock, Extend and Release, contexts that end
// at random points, Client.Close while calls are in flight, and lock loss
// (a DEL of the key, or renewal stalled by a blackholed network). Seeded:
// DISTLOCK_STRESS_SEED=<seed> repeats a run's choices (timing is the machine's).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// stressSlack is how late a call may return after the moment it should have
// on this shared, loaded 2-core machine under -race: generous on purpose.
const stressSlack = 1500 * time.Millisecond

func stressSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DISTLOCK_STRESS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = n
	}
	t.Logf("seed %d (DISTLOCK_STRESS_SEED=%d repeats the choices)", seed, seed)
	fmt.Fprintf(os.Stderr, "TestStressMixedCalls seed %d\n", seed)
	return seed
}

// stressSlot is one Client position: a Redis client and the current
// distlock Client on it, replaced by a new one (and the old one closed) at
// random while calls are in flight.
type stressSlot struct {
	name  string
	rdb   *redis.Client
	c     atomic.Pointer[distlock.Client]
	proxy *faultproxy.Proxy // nil: direct
	mu    sync.Mutex
	all   []*distlock.Client
	st    *stressRun
}

// stressObserver keeps what the Clients report per fence, to tell where a
// grant nobody holds came from.
type stressObserver struct {
	st   *stressRun
	slot string
}

func (o stressObserver) Start(ctx context.Context, _ distlock.EventKind, _ string) context.Context {
	return ctx
}
func (o stressObserver) Link(context.Context) string { return "" }
func (o stressObserver) Observe(_ context.Context, e distlock.Event) {
	if e.Fence == 0 {
		return
	}
	o.st.evMu.Lock()
	defer o.st.evMu.Unlock()
	o.st.events[e.Fence] = append(o.st.events[e.Fence], fmt.Sprintf("%s %s %s %s how=%v err=%v", time.Now().Format("05.000"), o.slot, e.Kind, e.Key, e.How, e.Err))
}

func (s *stressSlot) renew() *distlock.Client {
	c := distlock.New(s.rdb, distlock.WithObserver(stressObserver{s.st, s.name}))
	s.mu.Lock()
	s.all = append(s.all, c)
	s.mu.Unlock()
	return s.c.Swap(c)
}

type stressHolder struct {
	l      *distlock.Lock
	owner  string
	slot   string
	at     time.Time
	worker int
}

type stressRun struct {
	t      *testing.T
	strict map[string]bool // keys whose exclusion is checked

	mu         sync.Mutex
	holders    map[string][]*stressHolder // key -> current holders
	held       map[string]string          // token -> key, holds not yet released
	seen       map[string]time.Time       // lock value seen in Redis with no hold held -> first seen
	history    map[string][]string        // token -> what happened to its hold
	violations []string
	counts     map[string]int
	maxLate    time.Duration

	// ownerSeen: when a hold of key+" "+owner was last registered, or
	// released; a reentrant grant's lease is topped up by every reentry
	ownerSeen map[string]time.Time

	evMu   sync.Mutex
	events map[int64][]string
}

func (st *stressRun) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.violations) < 200 {
		st.violations = append(st.violations, time.Now().Format("15:04:05.000")+" "+msg)
	}
}

func (st *stressRun) count(what string) {
	st.mu.Lock()
	st.counts[what]++
	st.mu.Unlock()
}

// acquired registers a new hold and checks exclusion: every holder of the
// key with another owner must know its lock is lost by now.
func (st *stressRun) acquired(key string, h *stressHolder) {
	st.mu.Lock()
	var others []*stressHolder
	if st.strict[key] {
		for _, o := range st.holders[key] {
			if (o.owner == "" || o.owner != h.owner) && o.l.Err() == nil {
				others = append(others, o)
			}
		}
	}
	st.holders[key] = append(st.holders[key], h)
	st.ownerSeen[key+" "+h.owner] = time.Now()
	st.held[h.l.Token()] = key
	st.history[h.l.Token()] = append(st.history[h.l.Token()], fmt.Sprintf("%s granted to w%d on %s fence %d", time.Now().Format("05.000"), h.worker, h.slot, h.l.Fence()))
	st.mu.Unlock()
	for _, o := range others {
		// Give the loss signal a moment before calling it a violation (a
		// starved scheduler goroutine), and report how late it was.
		o, at := o, time.Now()
		go func() {
			select {
			case <-o.l.Lost():
				if late := time.Since(at); late > 100*time.Millisecond {
					st.violate("exclusion: %s granted (fence %d, %s, w%d) while %s's hold (fence %d, w%d, owner %q) did not know it lost; it learned %v later",
						key, h.l.Fence(), h.slot, h.worker, o.slot, o.l.Fence(), o.worker, o.owner, late)
				} else {
					st.count("exclusion: loss signal within 100ms of next grant")
				}
			case <-time.After(2 * time.Second):
				st.mu.Lock()
				still := false
				for _, x := range st.holders[key] {
					still = still || x == o
				}
				st.mu.Unlock()
				if still && o.l.Err() == nil {
					st.violate("exclusion: %s granted (fence %d, %s, w%d) while %s's hold (fence %d, w%d, owner %q, held since %v) still holds, not lost, 2s later",
						key, h.l.Fence(), h.slot, h.worker, o.slot, o.l.Fence(), o.worker, o.owner, time.Since(o.at).Round(time.Millisecond))
				}
			}
		}()
	}
}

// releasing unregisters a hold before its Release runs: once the delete
// lands, another caller may take the key at once.
func (st *stressRun) releasing(key string, h *stressHolder) {
	st.mu.Lock()
	defer st.mu.Unlock()
	hs := st.holders[key]
	for i, x := range hs {
		if x == h {
			st.holders[key] = append(hs[:i:i], hs[i+1:]...)
			break
		}
	}
	delete(st.held, h.l.Token())
	st.ownerSeen[key+" "+h.owner] = time.Now()
	st.history[h.l.Token()] = append(st.history[h.l.Token()], fmt.Sprintf("%s release (Err %v)", time.Now().Format("05.000"), h.l.Err()))
}

func (st *stressRun) note(tok, format string, args ...any) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.history[tok] = append(st.history[tok], time.Now().Format("05.000")+" "+fmt.Sprintf(format, args...))
}

// callBound is when a call that started at start must have returned: its
// ctx's deadline, or without one the cancel, or def.
type callCtx struct {
	ctx      context.Context
	cancel   context.CancelFunc
	bound    time.Time
	describe string
}

func (st *stressRun) newCtx(rng *rand.Rand, allowForever bool, def time.Duration) callCtx {
	now := time.Now()
	kinds := 5
	if allowForever {
		kinds = 6
	}
	switch rng.IntN(kinds) {
	case 4: // a long deadline, 1s to 3s: waiters that stay in line
		d := time.Duration(1000+rng.IntN(2000)) * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), d)
		return callCtx{ctx, cancel, now.Add(d), "deadline " + d.String()}
	case 0: // a deadline, 1ms to 600ms
		d := time.Duration(1+rng.IntN(600)) * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), d)
		return callCtx{ctx, cancel, now.Add(d), "deadline " + d.String()}
	case 1: // a deadline, and a cancel before it
		d := time.Duration(300+rng.IntN(700)) * time.Millisecond
		c := time.Duration(rng.IntN(int(d/time.Millisecond))) * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), d)
		time.AfterFunc(c, cancel)
		return callCtx{ctx, cancel, now.Add(d), "deadline " + d.String() + " cancel " + c.String()}
	case 2: // a cancel, no deadline
		c := time.Duration(rng.IntN(300)) * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(c, cancel)
		return callCtx{ctx, cancel, now.Add(c), "cancel " + c.String()}
	case 3: // already cancelled
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return callCtx{ctx, cancel, now, "cancelled"}
	}
	return callCtx{context.Background(), func() {}, now.Add(def), "background"}
}

// timed runs f and checks that it returned by cc's bound.
func (st *stressRun) timed(what string, cc callCtx, inflight *atomic.Int64, f func()) {
	inflight.Store(time.Now().UnixNano())
	defer func() {
		if p := recover(); p != nil {
			st.violate("panic in %s (%s): %v", what, cc.describe, p)
		}
		inflight.Store(0)
		late := time.Since(cc.bound)
		st.mu.Lock()
		if late > st.maxLate {
			st.maxLate = late
		}
		st.mu.Unlock()
		if late > stressSlack {
			st.violate("%s (%s) returned %v after its bound", what, cc.describe, late.Round(time.Millisecond))
		}
	}()
	f()
}

func errClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, distlock.ErrClosed):
		return "closed"
	case errors.Is(err, distlock.ErrNotObtained) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return "not obtained (ctx)"
	case errors.Is(err, distlock.ErrNotObtained):
		return "not obtained"
	case errors.Is(err, distlock.ErrNotHeld):
		return "not held"
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return "ctx"
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return "redis error"
	}
	return "other"
}

func TestStressMixedCalls(t *testing.T) {
	seed := stressSeed(t)
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	baseline := runtime.NumGoroutine()

	keys := []string{"s0", "s1", "s2", "c0", "c1"}
	st := &stressRun{t: t, strict: map[string]bool{"s0": true, "s1": true, "s2": true},
		holders: map[string][]*stressHolder{}, held: map[string]string{}, seen: map[string]time.Time{},
		history: map[string][]string{}, events: map[int64][]string{}, ownerSeen: map[string]time.Time{}, counts: map[string]int{}}

	// Four Client positions: two direct with ContextTimeoutEnabled, one
	// direct without (calls run in goroutines), one through a proxy that
	// blackholes at random (renewal stalls: its holds are lost).
	var slots []*stressSlot
	for i, mode := range []string{"direct", "direct", "nodeadline", "proxied"} {
		opt := srv.Options()
		s := &stressSlot{name: fmt.Sprintf("%s%d", mode, i), st: st}
		switch mode {
		case "nodeadline":
			opt.ContextTimeoutEnabled = false
		case "proxied":
			p, err := faultproxy.New(srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			s.proxy = p
			opt.Addr = p.Addr()
		}
		s.rdb = redis.NewClient(opt)
		s.renew()
		slots = append(slots, s)
	}

	const runFor = 10 * time.Second
	end := time.Now().Add(runFor)
	var wg sync.WaitGroup
	const workers = 24
	inflight := make([]atomic.Int64, workers)

	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for time.Now().Before(end) {
				stressOne(st, rng, w, slots, keys, &inflight[w])
			}
		}()
	}

	// Chaos: DEL of the chaos keys, blackholes of the proxy, Client swaps.
	stop := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Add(3)
	go func() {
		defer chaos.Done()
		rng := rand.New(rand.NewPCG(seed, 1000))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(50+rng.IntN(250)) * time.Millisecond):
			}
			admin.Del(ctx, "distlock:{c"+strconv.Itoa(rng.IntN(2))+"}")
		}
	}()
	go func() {
		defer chaos.Done()
		rng := rand.New(rand.NewPCG(seed, 1001))
		p := slots[3].proxy
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(500+rng.IntN(1500)) * time.Millisecond):
			}
			p.Blackhole()
			select {
			case <-stop:
			case <-time.After(time.Duration(300+rng.IntN(2500)) * time.Millisecond):
			}
			p.Heal()
			p.ResetAll() // a blackhole leaves the connections corrupt
		}
	}()
	go func() {
		defer chaos.Done()
		rng := rand.New(rand.NewPCG(seed, 1002))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(1000+rng.IntN(2000)) * time.Millisecond):
			}
			s := slots[rng.IntN(len(slots))]
			old := s.renew()
			start := time.Now()
			old.Close()
			// Close waits "for at most a few seconds" (2×cleanupTimeout).
			if d := time.Since(start); d > 4*time.Second+stressSlack {
				st.violate("Close of %s took %v", s.name, d)
			}
			st.count("client swapped")
		}
	}()

	// Watchdog: a call stuck far past any bound gets a goroutine dump.
	watchDone := make(chan struct{})
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		dumped := false
		for {
			select {
			case <-watchDone:
				return
			case <-tick.C:
			}
			for w := range inflight {
				if s := inflight[w].Load(); s != 0 && time.Since(time.Unix(0, s)) > 15*time.Second && !dumped {
					dumped = true
					var b strings.Builder
					_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
					st.violate("worker %d stuck in a call for %v:\n%s", w, time.Since(time.Unix(0, s)), b.String())
				}
			}
		}
	}()

	// Sampler: a lock key whose holds are all gone (released, or the Lock
	// call failed) must run out: its lease is renewed by nobody. Bound: the
	// longest TTL used (5 s), the 2 s a background release may take, and
	// slack.
	const orphanBound = 5*time.Second + 2*time.Second + 3*time.Second
	sampleStop := make(chan struct{})
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for {
			select {
			case <-sampleStop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, k := range keys {
				v, err := admin.Get(ctx, "distlock:{"+k+"}").Result()
				if err != nil {
					continue
				}
				f := strings.SplitN(v, " ", 5)
				if len(f) < 5 {
					st.violate("unparsable lock value %q", v)
					continue
				}
				now := time.Now()
				toks := strings.Split(f[2], ",")
				st.mu.Lock()
				anyHeld := false
				for _, tok := range toks {
					_, ok := st.held[tok]
					anyHeld = anyHeld || ok
				}
				id := k + " " + f[0] + " " + f[2]
				first, ok := st.seen[id]
				if anyHeld {
					delete(st.seen, id)
				} else if !ok {
					st.seen[id] = now
				}
				var hist []string
				// A reentrant grant's lease is lengthened by every reentry
				// of its owner (documented: a hold left by a caller that is
				// gone lasts while the owner's other holders renew it).
				owner := ""
				if n, rest, found := strings.Cut(f[4], ":"); found {
					if ln, err := strconv.Atoi(n); err == nil && ln <= len(rest) {
						owner = rest[:ln]
					}
				}
				reentered := owner != "" && now.Sub(st.ownerSeen[k+" "+owner]) < 6*time.Second
				if reentered {
					delete(st.seen, id)
				}
				if !anyHeld && !reentered && ok && now.Sub(first) > orphanBound {
					for _, tok := range toks {
						hist = append(hist, tok+": "+strings.Join(st.history[tok], "; "))
					}
					st.seen[id] = now.Add(time.Hour) // report once
				}
				st.mu.Unlock()
				if hist != nil {
					fence, _ := strconv.ParseInt(f[0], 10, 64)
					st.evMu.Lock()
					hist = append(hist, "events of the fence: "+strings.Join(st.events[fence], "; "))
					st.evMu.Unlock()
					hist = append(hist, "value: "+v)
					pttl := admin.PTTL(ctx, "distlock:{"+k+"}").Val()
					st.violate("lease renewed for nobody: %s fence %s, none of its holds held by anyone for %v, PTTL %v; holds:\n  %s",
						k, f[0], now.Sub(first).Round(time.Millisecond), pttl, strings.Join(hist, "\n  "))
				}
			}
		}
	}()

	wg.Wait()
	close(stop)
	chaos.Wait()
	slots[3].proxy.Heal()
	slots[3].proxy.ResetAll()
	close(watchDone)
	st.mu.Lock()
	left := 0
	for _, hs := range st.holders {
		left += len(hs)
	}
	st.mu.Unlock()
	if left != 0 {
		st.violate("%d holders still registered after the workers ended", left)
	}

	// Quiet period, Clients still open: every lock key must run out or be
	// gone (the sampler reports any lease still renewed), the lines too.
	deadline := time.Now().Add(orphanBound + 2*time.Second)
	for time.Now().Before(deadline) {
		if len(stressKeys(t, admin)) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(sampleStop)
	<-sampleDone
	if ks := stressKeys(t, admin); len(ks) != 0 {
		var locks []string
		for _, k := range ks {
			if !strings.HasSuffix(k, ":line") {
				locks = append(locks, k)
			}
		}
		if len(locks) > 0 {
			st.violate("lock keys left %v after all holds ended, Clients open: %v", orphanBound+2*time.Second, stressDescribe(admin, locks))
		}
		t.Logf("lines left after the quiet period (they expire 30s after the last ask): %v", stressDescribe(admin, ks))
	}

	// Close everything: no subscription and no goroutine may stay.
	for _, s := range slots {
		s.mu.Lock()
		for _, c := range s.all {
			start := time.Now()
			c.Close()
			if d := time.Since(start); d > 4*time.Second+stressSlack {
				st.violate("final Close of %s took %v", s.name, d)
			}
		}
		s.mu.Unlock()
	}
	subDeadline := time.Now().Add(5 * time.Second)
	var chans []string
	for {
		chans, _ = admin.PubSubChannels(ctx, "*").Result()
		if len(chans) == 0 || time.Now().After(subDeadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(chans) != 0 {
		st.violate("channels still subscribed 5s after every Client closed: %v", chans)
	}
	for _, s := range slots {
		_ = s.rdb.Close()
		if s.proxy != nil {
			_ = s.proxy.Close()
		}
	}
	goDeadline := time.Now().Add(15 * time.Second)
	var n int
	for {
		n = runtime.NumGoroutine()
		if n <= baseline+2 || time.Now().After(goDeadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n > baseline+2 {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		st.violate("%d goroutines 15s after everything closed, %d before the Clients:\n%s", n, baseline, b.String())
	}
	keyDeadline := time.Now().Add(35 * time.Second) // lineTTL and slack
	for len(stressKeys(t, admin)) != 0 && time.Now().Before(keyDeadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if ks := stressKeys(t, admin); len(ks) != 0 {
		st.violate("keys left 35s after every Client closed: %v", stressDescribe(admin, ks))
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	t.Logf("seed %d: counts %v; latest return past a bound %v", seed, st.counts, st.maxLate.Round(time.Millisecond))
	for _, v := range st.violations {
		t.Error(v)
	}
}

// stressOne runs one random operation of worker w.
func stressOne(st *stressRun, rng *rand.Rand, w int, slots []*stressSlot, keys []string, inflight *atomic.Int64) {
	slot := slots[rng.IntN(len(slots))]
	c := slot.c.Load()
	key := keys[rng.IntN(len(keys))]
	var opts []distlock.Option
	ttl := time.Duration(3000+rng.IntN(2000)) * time.Millisecond
	if slot.proxy != nil || strings.HasPrefix(key, "c") {
		ttl = time.Duration(1000+rng.IntN(1000)) * time.Millisecond // a short TTL: stalls lose it
	}
	short := false
	if slot.proxy == nil && !strings.HasPrefix(key, "c") && rng.IntN(8) == 0 {
		ttl = time.Duration(250+rng.IntN(350)) * time.Millisecond // a short lease, renewed
		short = true
	}
	opts = append(opts, distlock.WithTTL(ttl))
	owner := ""
	if rng.IntN(4) == 0 {
		owner = "o" + strconv.Itoa(rng.IntN(2))
		opts = append(opts, distlock.WithOwner(owner))
	}
	if rng.IntN(3) == 0 {
		opts = append(opts, distlock.WithFair())
	}
	try := rng.IntN(4) == 0
	cc := st.newCtx(rng, false, 0)
	defer cc.cancel()
	var l *distlock.Lock
	var err error
	what := "Lock"
	if try {
		what = "TryLock"
	}
	st.timed(what, cc, inflight, func() {
		if try {
			l, err = c.TryLock(cc.ctx, key, opts...)
		} else {
			l, err = c.Lock(cc.ctx, key, opts...)
		}
	})
	st.count(what + " " + errClass(err))
	if err != nil {
		if l != nil {
			st.violate("%s returned a Lock and %v", what, err)
		}
		if c := errClass(err); c == "other" || c == "not held" {
			st.violate("%s on %s (%s): unexpected error %v", what, key, cc.describe, err)
		}
		return
	}
	if l == nil {
		st.violate("%s returned nil, nil", what)
		return
	}
	h := &stressHolder{l: l, owner: owner, slot: slot.name, at: time.Now(), worker: w}
	st.acquired(key, h)
	holds := []*stressHolder{h}
	if err := l.Err(); err != nil && !errors.Is(err, distlock.ErrClosed) && slot.proxy == nil && st.strict[key] {
		// A direct Client, a key nobody deletes: nothing can have lost the
		// lock between the grant and the return.
		st.violate("%s on %s (%s, short lease %v) returned a Lock already lost: %v", what, key, slot.name, short, err)
	}

	// The critical section: a few ms, an Extend, a reentrant hold.
	for range rng.IntN(3) {
		switch rng.IntN(3) {
		case 0:
			d := time.Duration(rng.IntN(30)) * time.Millisecond
			if rng.IntN(10) == 0 {
				d = time.Duration(300+rng.IntN(500)) * time.Millisecond // waiters stay in line
			}
			time.Sleep(d)
		case 1:
			ec := st.newCtx(rng, true, 3*time.Second)
			var eerr error
			ettl := time.Duration(1000+rng.IntN(4000)) * time.Millisecond
			if slot.proxy != nil || strings.HasPrefix(key, "c") {
				ettl = time.Duration(1000+rng.IntN(1000)) * time.Millisecond
			}
			st.timed("Extend", ec, inflight, func() { eerr = l.Extend(ec.ctx, ettl) })
			ec.cancel()
			st.count("Extend " + errClass(eerr))
			st.note(l.Token(), "Extend(%v, %s) returned %v", ettl, ec.describe, eerr)
			if errClass(eerr) == "other" && slot.proxy == nil {
				st.violate("Extend on %s: unexpected error %v", key, eerr)
			}
		case 2:
			if owner == "" {
				continue
			}
			rc := st.newCtx(rng, false, 0)
			var l2 *distlock.Lock
			var rerr error
			st.timed("reentrant Lock", rc, inflight, func() { l2, rerr = c.Lock(rc.ctx, key, opts...) })
			rc.cancel()
			st.count("reentrant Lock " + errClass(rerr))
			if rerr == nil {
				h2 := &stressHolder{l: l2, owner: owner, slot: slot.name, at: time.Now(), worker: w}
				st.acquired(key, h2)
				holds = append(holds, h2)
				if l2.Fence() != l.Fence() && l.Err() == nil && l2.Err() == nil {
					// A new grant with another fence while this hold still
					// counts as held: the first hold was lost in Redis first.
					st.count("reentrant Lock got a new grant")
				}
			}
		}
	}
	// Release in random order, with random contexts.
	rng.Shuffle(len(holds), func(i, j int) { holds[i], holds[j] = holds[j], holds[i] })
	for _, x := range holds {
		rc := st.newCtx(rng, true, 2*time.Second+4*time.Second)
		st.releasing(key, x)
		var rerr error
		st.timed("Release", rc, inflight, func() { rerr = x.l.Release(rc.ctx) })
		rc.cancel()
		st.count("Release " + errClass(rerr))
		st.note(x.l.Token(), "Release (%s) returned %v", rc.describe, rerr)
		if errClass(rerr) == "other" && slot.proxy == nil {
			st.violate("Release on %s: unexpected error %v", key, rerr)
		}
	}
}

// stressKeys lists the keys distlock left, but the fence counter.
func stressKeys(t *testing.T, admin *redis.Client) []string {
	ks, err := admin.Keys(context.Background(), "distlock:*").Result()
	if err != nil {
		t.Error(err)
		return nil
	}
	var out []string
	for _, k := range ks {
		if k != "distlock:fence" {
			out = append(out, k)
		}
	}
	return out
}

func stressDescribe(admin *redis.Client, ks []string) string {
	var b strings.Builder
	ctx := context.Background()
	for _, k := range ks {
		typ := admin.Type(ctx, k).Val()
		var v any
		if typ == "list" {
			v = admin.LRange(ctx, k, 0, -1).Val()
		} else {
			v = admin.Get(ctx, k).Val()
		}
		fmt.Fprintf(&b, "\n  %s (%s, PTTL %v): %v", k, typ, admin.PTTL(ctx, k).Val(), v)
	}
	return b.String()
}

// A Lock call on a key whose channel its Client keeps subscribed (it waited
// for the key lately) lines up in its first attempt (mode join), with
// q.again false and r.sent unset. If that attempt's answer is lost to a
// connection reset after Redis granted the free lock, go-redis sends it
// again and the script finds the call's own token holding the lock:
// {1, fence, 1, 1}, the reply of a handoff. single.ask takes it for a
// handoff because the call listens (q.w != nil), and builds the Lock from
// r.sent, the zero time: its validity deadline is in year 1, so the
// renewer declares it lost at once. Either confirm loses that race
// (ErrNotHeld: the call asks again, finds its own grant again, and spins
// until the lease runs out), or Lock returns a Lock that is already lost.
func TestRetriedJoinAttemptAfterResetIsTheCallsOwnGrant(t *testing.T) {
	for _, timeouts := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", timeouts), func(t *testing.T) {
			srv := redistest.Start(t)
			direct := srv.Client(t)
			other := distlock.New(direct)
			t.Cleanup(func() { other.Close() })
			c, p := outageClient(t, srv, redis.Options{ContextTimeoutEnabled: timeouts})
			ctx := ctxT(t, 60*time.Second)
			warm(t, ctx, c)
			// c waits for k once, so that its channel for k stays subscribed.
			h, err := other.Lock(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err = c.Lock(wctx, "k")
			cancel()
			if !errors.Is(err, distlock.ErrNotObtained) {
				t.Fatalf("Lock of a held key: %v", err)
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, "the waiter's line entry gone", func() bool {
				return direct.Exists(ctx, "distlock:{k}:line").Val() == 0
			})
			const ttl = 8 * time.Second
			var l *distlock.Lock
			start := time.Now()
			resetMidCall(t, p, func() {
				lctx, cancel := context.WithTimeout(ctx, 3*ttl)
				defer cancel()
				l, err = c.Lock(lctx, "k", distlock.WithTTL(ttl))
			})
			took := time.Since(start)
			if err != nil {
				t.Fatalf("Lock of a free key whose first answer was lost to a reset: %v after %v", err, took)
			}
			defer l.Release(ctx)
			// One reset round trip is 2×500ms, and go-redis' retry another.
			if took > 2*time.Second+outageSlack {
				t.Errorf("Lock of a free key whose first answer was lost to a reset took %v (lease %v)", took, ttl)
			}
			if l.Err() != nil {
				t.Errorf("Lock returned a Lock already lost: Err() = %v (PTTL in Redis %v)", l.Err(), direct.PTTL(ctx, "distlock:{k}").Val())
			}
		})
	}
}

// A waiter with a short lease (WithTTL below its re-ask interval, 1 s)
// that is handed the lock late in its wait: the handoff's first lease is
// its TTL, set by the release, but single.handedOver counts it from the
// waiter's last ask (r.sent), which is longer ago than the TTL. The Lock
// is built with a validity deadline already past and handed to the
// renewer (newLock → track) before confirm asks Redis, so the renewer
// declares it lost (ErrUnreachable) while the grant is alive in Redis:
// Lock returns a Lock that is already lost (whose lease confirm has just
// extended, renewed for nobody), or confirm finds it ended, the call asks
// again, is told of its own grant again, and spins until that lease runs
// out.
func TestShortTTLWaiterHandedLateIsHeld(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	a := distlock.New(rdb)
	t.Cleanup(func() { a.Close() })
	b := distlock.New(srv.Client(t))
	t.Cleanup(func() { b.Close() })
	ctx := ctxT(t, 60*time.Second)
	const ttl = 200 * time.Millisecond
	rng := rand.New(rand.NewPCG(1, 2))
	var lost, slow int
	const rounds = 12
	for i := range rounds {
		h, err := a.Lock(ctx, "k", distlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		type res struct {
			l   *distlock.Lock
			err error
			at  time.Time
		}
		done := make(chan res, 1)
		go func() {
			l, err := b.Lock(ctx, "k", distlock.WithTTL(ttl))
			done <- res{l, err, time.Now()}
		}()
		// Release somewhere in the waiter's second re-ask interval.
		time.Sleep(1200*time.Millisecond + time.Duration(rng.IntN(800))*time.Millisecond)
		released := time.Now()
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatalf("round %d: waiter: %v", i, r.err)
		}
		if r.l.Err() != nil {
			lost++
			t.Logf("round %d: Lock returned a Lock already lost (%v); PTTL in Redis %v", i, r.l.Err(), rdb.PTTL(ctx, "distlock:{k}").Val())
		} else if d := r.at.Sub(released); d > ttl {
			slow++
			t.Logf("round %d: the waiter took %v after the release", i, d)
		}
		_ = r.l.Release(ctx)
	}
	if lost > 0 || slow > 0 {
		t.Errorf("of %d handoffs to a waiter with a %v lease: %d returned a Lock already lost, %d took longer than the lease after the release", rounds, ttl, lost, slow)
	}
}
