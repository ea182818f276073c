package distlock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	"github.com/redis/go-redis/v9"
)

// interval is one hold as a helper process reported it: "<kind> <start ns>
// <end ns>", both taken inside the hold (after Lock returned, before
// Release), so overlaps between them are real.
type interval struct {
	kind       string
	start, end int64
	proc       int
}

// collect reads "hold <kind> <start> <end>" lines from the helpers until
// they exit.
func collect(t *testing.T, procs []*helperProc, within time.Duration) []interval {
	t.Helper()
	var out []interval
	for i, p := range procs {
		for line := range p.lines {
			f := strings.Fields(line)
			if len(f) == 4 && f[0] == "hold" {
				s, _ := strconv.ParseInt(f[2], 10, 64)
				e, _ := strconv.ParseInt(f[3], 10, 64)
				out = append(out, interval{f[1], s, e, i})
			}
		}
		p.wait(t, within)
	}
	return out
}

// maxConcurrency is the most intervals of kind open at one instant.
func maxConcurrency(iv []interval, kind string) int {
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, x := range iv {
		if kind == "" || x.kind == kind {
			edges = append(edges, edge{x.start, 1}, edge{x.end, -1})
		}
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta // an end before a start at the same ns
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.delta
		most = max(most, n)
	}
	return most
}

func printHold(kind string, start time.Time) {
	fmt.Printf("hold %s %d %d\n", kind, start.UnixNano(), time.Now().UnixNano())
}

// helperRW takes DISTLOCK_KEY's read-write lock DISTLOCK_N times, as a
// reader or a writer (DISTLOCK_MODE r, w, or mixed: every fourth a
// writer), holding it DISTLOCK_HOLD each time.
func helperRW(c *distlock.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rw, err := c.NewRWMutex(os.Getenv("DISTLOCK_KEY"))
	if err != nil {
		return err
	}
	hold := envDuration("DISTLOCK_HOLD", 10*time.Millisecond)
	for i := range envInt("DISTLOCK_N", 20) {
		mode := os.Getenv("DISTLOCK_MODE")
		if mode == "mixed" {
			mode = map[bool]string{true: "w", false: "r"}[i%4 == 3]
		}
		var l *distlock.Lock
		asked := time.Now()
		if mode == "w" {
			l, err = rw.Lock(ctx, distlock.WithTTL(envDuration("DISTLOCK_TTL", 2*time.Second)))
		} else {
			l, err = rw.RLock(ctx, distlock.WithTTL(envDuration("DISTLOCK_TTL", 2*time.Second)))
		}
		if err != nil {
			return err
		}
		start := time.Now()
		if mode == "w" {
			fmt.Printf("waited %d\n", start.Sub(asked).Nanoseconds())
		}
		if os.Getenv("DISTLOCK_FOREVER") == "1" {
			fmt.Println("holding")
			time.Sleep(time.Hour) // until the test kills this process
		}
		time.Sleep(hold) // the protected work
		printHold(mode, start)
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// TestRWMutexAcrossProcesses: 6 processes mixing readers and writers. A
// writer never overlaps anyone; readers do overlap.
func TestRWMutexAcrossProcesses(t *testing.T) {
	_, _, srv := setup(t)
	var procs []*helperProc
	for range 6 {
		procs = append(procs, startHelper(t, "rw", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEY=doc",
			"DISTLOCK_MODE=mixed", "DISTLOCK_N=24", "DISTLOCK_HOLD=15ms"))
	}
	iv := collect(t, procs, 60*time.Second)
	if len(iv) != 6*24 {
		t.Fatalf("%d holds reported, want %d", len(iv), 6*24)
	}
	for _, w := range iv {
		if w.kind != "w" {
			continue
		}
		for _, o := range iv {
			if o != w && o.start < w.end && w.start < o.end {
				t.Fatalf("a writer (%d–%d) overlaps a %s hold (%d–%d)", w.start, w.end, o.kind, o.start, o.end)
			}
		}
	}
	readers := maxConcurrency(iv, "r")
	t.Logf("%d holds; at most %d readers at once", len(iv), readers)
	if readers < 2 {
		t.Fatalf("readers never overlapped (at most %d at once)", readers)
	}
}

// A writer gets in within a bound while readers keep arriving: new readers
// queue behind the waiting writer.
func TestRWMutexWriterNotStarved(t *testing.T) {
	_, _, srv := setup(t)
	const hold = 40 * time.Millisecond
	var readers []*helperProc
	for range 4 {
		readers = append(readers, startHelper(t, "rw", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEY=busy",
			"DISTLOCK_MODE=r", "DISTLOCK_N=60", "DISTLOCK_HOLD="+hold.String()))
	}
	for _, r := range readers {
		r.expect(t, "hold r", 10*time.Second) // readers are streaming in
	}
	writer := startHelper(t, "rw", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEY=busy", "DISTLOCK_MODE=w", "DISTLOCK_N=1")
	waited, _ := strconv.ParseInt(writer.expect(t, "waited ", 20*time.Second), 10, 64)
	writer.wait(t, 10*time.Second)
	// The writer waits for the readers that hold the lock when it lines up,
	// at most one hold each, plus start-up of its process and a loaded
	// machine's delays; starved, it would wait for all 4×60 holds (2.4s).
	bound := 25 * hold
	t.Logf("the writer waited %v with 4 processes of readers streaming", time.Duration(waited))
	if time.Duration(waited) > bound {
		t.Fatalf("the writer waited %v, over %v: starved by readers", time.Duration(waited), bound)
	}
}

// A reader killed with SIGKILL frees its share when its own lease runs
// out: a writer gets the lock then, not before.
func TestRWMutexKilledReaderFreesItsShare(t *testing.T) {
	c, _, srv := setup(t)
	ctx := ctxT(t, 20*time.Second)
	const ttl = time.Second
	reader := startHelper(t, "rw", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEY=share",
		"DISTLOCK_MODE=r", "DISTLOCK_FOREVER=1", "DISTLOCK_TTL="+ttl.String())
	reader.expect(t, "holding", 10*time.Second)
	rw, _ := c.NewRWMutex("share")
	other, err := rw.RLock(ctx) // a live reader, released at once
	if err != nil {
		t.Fatal(err)
	}
	other.Release(ctx)
	_ = reader.cmd.Process.Kill()
	killed := time.Now()
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(killed)
	t.Logf("writer in %v after the reader was killed (its lease %v, renewed every %v)", took.Round(time.Millisecond), ttl, ttl/3)
	if took > ttl+500*time.Millisecond {
		t.Fatalf("the dead reader's share was held %v, its lease is %v", took, ttl)
	}
	w.Release(ctx)
}

// helperSem takes a permit of DISTLOCK_KEY (limit DISTLOCK_LIMIT)
// DISTLOCK_N times, holding each DISTLOCK_HOLD; with DISTLOCK_ORDER=1 it
// prints "got <fence>" on each grant.
func helperSem(c *distlock.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.NewSemaphore(os.Getenv("DISTLOCK_KEY"), envInt("DISTLOCK_LIMIT", 3))
	if err != nil {
		return err
	}
	opts := []distlock.Option{distlock.WithTTL(envDuration("DISTLOCK_TTL", 2*time.Second))}
	for range envInt("DISTLOCK_N", 20) {
		l, err := s.Acquire(ctx, opts...)
		if err != nil {
			return err
		}
		start := time.Now()
		if os.Getenv("DISTLOCK_ORDER") == "1" {
			fmt.Println("got", l.Fence())
		}
		if os.Getenv("DISTLOCK_FOREVER") == "1" {
			fmt.Println("holding")
			time.Sleep(time.Hour) // until the test kills this process
		}
		time.Sleep(envDuration("DISTLOCK_HOLD", 10*time.Millisecond)) // the protected work
		printHold("p", start)
		if err := l.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// TestSemaphoreAcrossProcesses: 8 processes on a semaphore of 3: never more
// than 3 holders, and 3 at once is reached.
func TestSemaphoreAcrossProcesses(t *testing.T) {
	_, rdb, srv := setup(t)
	var procs []*helperProc
	for range 8 {
		procs = append(procs, startHelper(t, "sem", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEY=pool",
			"DISTLOCK_LIMIT=3", "DISTLOCK_N=15", "DISTLOCK_HOLD=10ms"))
	}
	iv := collect(t, procs, 60*time.Second)
	most := maxConcurrency(iv, "p")
	t.Logf("%d permits granted; at most %d held at once", len(iv), most)
	if most > 3 {
		t.Fatalf("%d permits held at once, limit 3", most)
	}
	if most < 3 {
		t.Fatalf("never 3 permits at once (at most %d)", most)
	}
	if keys := rdb.Keys(context.Background(), "*").Val(); len(keys) != 1 {
		t.Fatalf("left in Redis: %v", keys)
	}
}

// A holder killed with SIGKILL gives its permit back when its lease runs
// out; waiters are served in arrival order.
func TestSemaphoreKilledHolderAndOrder(t *testing.T) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 30*time.Second)
	const ttl = time.Second
	s, _ := c.NewSemaphore("slots", 2)
	mine, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dead := startHelper(t, "sem", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEY=slots", "DISTLOCK_LIMIT=2",
		"DISTLOCK_FOREVER=1", "DISTLOCK_TTL="+ttl.String())
	dead.expect(t, "holding", 10*time.Second)
	// Three waiters line up one after another, each in its own process.
	var waiters []*helperProc
	for i := range 3 {
		w := startHelper(t, "sem", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEY=slots", "DISTLOCK_LIMIT=2",
			"DISTLOCK_N=1", "DISTLOCK_ORDER=1", "DISTLOCK_HOLD=300ms")
		waitFor(t, 5*time.Second, "waiter to line up", func() bool {
			return rdb.LLen(ctx, "distlock:sem{slots}:line").Val() == int64(i+1)
		})
		waiters = append(waiters, w)
	}
	_ = dead.cmd.Process.Kill()
	killed := time.Now()
	fences := []string{waiters[0].expect(t, "got ", 5*time.Second)}
	took := time.Since(killed)
	t.Logf("the dead holder's permit went to the first waiter %v after the kill (lease %v)", took.Round(time.Millisecond), ttl)
	if took > ttl+500*time.Millisecond {
		t.Fatalf("the dead holder's permit came back after %v", took)
	}
	if err := mine.Release(ctx); err != nil {
		t.Fatal(err)
	}
	fences = append(fences, waiters[1].expect(t, "got ", 5*time.Second), waiters[2].expect(t, "got ", 5*time.Second))
	for _, w := range waiters {
		w.wait(t, 10*time.Second)
	}
	// The order: fences rise with every grant, so the waiters' fences rise
	// in their arrival order.
	last := int64(0)
	for i, s := range fences {
		f, err := strconv.ParseInt(s, 10, 64)
		if err != nil || f <= last {
			t.Fatalf("waiter %d got fence %q after %d: waiters served out of arrival order (fences %v)", i, s, last, fences)
		}
		last = f
	}
}

// helperMulti takes DISTLOCK_KEYS (comma-separated, in that order)
// DISTLOCK_N times with LockAll.
func helperMulti(c *distlock.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keys := strings.Split(os.Getenv("DISTLOCK_KEYS"), ",")
	for range envInt("DISTLOCK_N", 100) {
		m, err := c.LockAll(ctx, keys, distlock.WithTTL(2*time.Second))
		if err != nil {
			return err
		}
		start := time.Now()
		for _, k := range keys {
			printHold(k, start)
		}
		if err := m.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// TestLockAllNoDeadlock: two processes take {a,b} and {b,a} 500 times each:
// no deadlock, and no key held by both at once.
func TestLockAllNoDeadlock(t *testing.T) {
	_, _, srv := setup(t)
	p1 := startHelper(t, "multi", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEYS=a,b", "DISTLOCK_N=500")
	p2 := startHelper(t, "multi", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEYS=b,a", "DISTLOCK_N=500")
	start := time.Now()
	iv := collect(t, []*helperProc{p1, p2}, 60*time.Second)
	t.Logf("1000 LockAll calls in %v", time.Since(start).Round(time.Millisecond))
	for _, k := range []string{"a", "b"} {
		if n := maxConcurrency(iv, k); n != 1 {
			t.Fatalf("key %s held %d times at once", k, n)
		}
	}
}

// LockAll is all or nothing: a set whose last key is held gets none.
func TestLockAllAllOrNothing(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	held, err := c.TryLock(ctx, "z")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLockAll(ctx, []string{"x", "y", "z"}); !errors.Is(err, distlock.ErrNotObtained) {
		t.Fatalf("TryLockAll with z held: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.LockAll(short, []string{"z", "y", "x"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockAll with z held: %v", err)
	}
	waitFor(t, time.Second, "x and y to be given back", func() bool {
		return rdb.Exists(ctx, "distlock:{x}", "distlock:{y}").Val() == 0
	})
	held.Release(ctx)
	m, err := c.LockAll(ctx, []string{"z", "x", "y"})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(m.Locks()); got != 3 || m.Locks()[0].Key() != "x" {
		t.Fatalf("locks %d, first %q", got, m.Locks()[0].Key())
	}
	rdb.Del(ctx, "distlock:{y}") // one member vanishes: the set is lost
	select {
	case <-m.Lost():
		if !errors.Is(m.Err(), distlock.ErrLost) || !strings.Contains(m.Err().Error(), `"y"`) {
			t.Fatalf("Err %v", m.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the loss of one member was not signalled")
	}
	if _, err := c.LockAll(ctx, []string{"a", "a"}); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Fatalf("duplicate key: %v", err)
	}
}

// LockAll does not return a set one of whose locks was lost while it
// waited for another: it gives the rest back and fails.
func TestLockAllFailsWhenAnEarlyLockIsLost(t *testing.T) {
	rec := &recorder{}
	c, rdb, _ := setup(t, distlock.WithObserver(rec))
	other := distlock.New(rdb)
	t.Cleanup(func() { other.Close() })
	ctx := ctxT(t, 20*time.Second)
	b, err := other.Lock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		m, err := c.LockAll(ctx, []string{"b", "a"}, distlock.WithTTL(900*time.Millisecond))
		if err == nil {
			m.Release(ctx)
		}
		res <- err
	}()
	waitFor(t, 5*time.Second, "LockAll to take a", func() bool { return rdb.Exists(ctx, "distlock:{a}").Val() == 1 })
	rdb.Del(ctx, "distlock:{a}") // a vanishes: its next renewal finds it gone
	waitFor(t, 5*time.Second, "the loss of a", func() bool {
		_, ok := rec.find(distlock.EventHoldEnded, func(e distlock.Event) bool { return e.Key == "a" && errors.Is(e.Err, distlock.ErrLost) })
		return ok
	})
	b.Release(ctx)
	select {
	case err := <-res:
		if !errors.Is(err, distlock.ErrNotObtained) || !errors.Is(err, distlock.ErrLost) || !strings.Contains(err.Error(), `"a"`) {
			t.Fatalf("LockAll after its lock a was lost: %v, want ErrNotObtained and ErrLost naming a", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LockAll did not return")
	}
	waitFor(t, 5*time.Second, "b to be given back", func() bool { return rdb.Exists(ctx, "distlock:{b}").Val() == 0 })
}

// helperElect campaigns in DISTLOCK_KEY as DISTLOCK_VALUE; as leader it
// appends "<term> <value>" entries to the list "log" through a fence
// guard, so that a stale leader's writes are refused, until killed.
func helperElect(c *distlock.Client, rdb *redis.Client) error {
	ctx := context.Background()
	e, err := c.NewElection(os.Getenv("DISTLOCK_KEY"))
	if err != nil {
		return err
	}
	value := os.Getenv("DISTLOCK_VALUE")
	lead, err := e.Campaign(ctx, value, distlock.WithTTL(envDuration("DISTLOCK_TTL", time.Second)))
	if err != nil {
		return err
	}
	fmt.Printf("leader %d\n", lead.Fence())
	work, stop := lead.Context(ctx)
	defer stop()
	guard := fence.NewGuard(rdb)
	appendLog := fence.NewScript(`return redis.call('RPUSH', KEYS[1], ARGV[1])`)
	for work.Err() == nil {
		entry := strconv.FormatInt(lead.Fence(), 10) + " " + value
		err := guard.Run(ctx, appendLog, lead.Fence(), []string{"{log}"}, entry).Err()
		if errors.Is(err, fence.ErrStale) {
			fmt.Println("stale")
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "append:", err)
		}
		time.Sleep(20 * time.Millisecond) // the leader's periodic work
	}
	fmt.Printf("ended %v\n", context.Cause(work))
	bufio.NewReader(os.Stdin).ReadString('\n') // until the test kills this process
	return nil
}

// TestElectionAcrossProcesses: 5 candidates; the leader is killed 3 times.
// At most one leads at any moment (terms in the fenced log only rise), a
// new leader takes over within TTL + 300ms of the old one's lease ending
// (it cannot be sooner: it waits for the dead leader's lease), and an
// observer sees every leader, in order.
func TestElectionAcrossProcesses(t *testing.T) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 60*time.Second)
	const ttl = time.Second
	e, err := c.NewElection("primary")
	if err != nil {
		t.Fatal(err)
	}
	octx, stopObserving := context.WithCancel(ctx)
	seen := e.Observe(octx)
	if first := <-seen; first.Elected() {
		t.Fatalf("a leader before any candidate: %+v", first)
	}
	procs := map[string]*helperProc{}
	for i := range 5 {
		v := fmt.Sprintf("cand-%d", i)
		procs[v] = startHelper(t, "elect", "DISTLOCK_ADDR="+srv.Addr, "DISTLOCK_KEY=primary",
			"DISTLOCK_VALUE="+v, "DISTLOCK_TTL="+ttl.String())
	}
	var observed []distlock.Leader
	next := func() distlock.Leader {
		t.Helper()
		for {
			select {
			case l := <-seen:
				if l.Elected() {
					observed = append(observed, l)
					return l
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no new leader observed")
			}
		}
	}
	leader := next()
	for range 3 {
		term := strconv.FormatInt(leader.Fence, 10) + " "
		waitFor(t, 5*time.Second, "the leader to write its log", func() bool {
			n := 0
			for _, entry := range rdb.LRange(ctx, "{log}", 0, -1).Val() {
				if strings.HasPrefix(entry, term) {
					n++
				}
			}
			return n >= 3
		})
		p := procs[leader.Value]
		info, _ := e.Leader(ctx)
		expiry := time.Now().Add(info.TTL) // the lease the killed leader leaves behind
		_ = p.cmd.Process.Kill()
		killed := time.Now()
		leader = next()
		// takeover slack: a timer, a round trip, a publish and the observer,
		// with 5 helper processes on 2 cores; a waiter that missed the
		// lease's end would wait a line refresh or more
		const slack = 300 * time.Millisecond
		if since := time.Since(killed); since > ttl+slack {
			t.Fatalf("a new leader %v after the leader was killed, TTL %v", since, ttl)
		}
		late := time.Since(expiry)
		t.Logf("%s took over %v after the dead leader's lease ran out", leader.Value, late.Round(time.Millisecond))
		if late > slack+ttl/3 { // the lease may have been renewed just before the kill
			t.Fatalf("the new leader came %v after the old lease ran out", late)
		}
	}
	stopObserving()
	terms := rdb.LRange(ctx, "{log}", 0, -1).Val()
	last := int64(0)
	for _, entry := range terms {
		term, _ := strconv.ParseInt(strings.Fields(entry)[0], 10, 64)
		if term < last {
			t.Fatalf("fenced log goes back from term %d to %d: two leaders at once", last, term)
		}
		last = term
	}
	var fences []int64
	for _, l := range observed {
		fences = append(fences, l.Fence)
	}
	if !slices.IsSorted(fences) || len(fences) != 4 {
		t.Fatalf("observed leaders %v: want 4, terms rising", fences)
	}
	t.Logf("%d log entries from %d terms; observed %v", len(terms), len(observed), fences)
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
}

// A free semaphore or read-write lock whose line holds only waiters that
// are gone (a process killed while it waited) is taken at once: the attempt
// drops them and finds nobody ahead. So is a read lock that readers hold.
func TestTryOverWaitersThatAreGone(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	gone := "tok-gone client-gone 10000 s 0 0:"
	s, _ := c.NewSemaphore("gone", 1)
	rdb.RPush(ctx, "distlock:sem{gone}:line", gone)
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire behind a waiter that is gone: %v", err)
	}
	_ = p.Release(ctx)
	m, _ := c.NewRWMutex("gone")
	rdb.RPush(ctx, "distlock:rw{gone}:line", strings.Replace(gone, " s ", " x ", 1))
	r, err := m.TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock behind a writer that is gone: %v", err)
	}
	// And while readers hold: a writer waiting stops readers that come
	// after it, but not a writer that is gone (it stopped them until the
	// line expired, 30 s).
	rdb.RPush(ctx, "distlock:rw{gone}:line", strings.Replace(gone, " s ", " x ", 1))
	r2, err := m.TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock behind a writer that is gone, while a reader holds: %v", err)
	}
	_ = r2.Release(ctx)
	_ = r.Release(ctx)
	if n := rdb.Exists(ctx, "distlock:sem{gone}:line", "distlock:rw{gone}:line").Val(); n != 0 {
		t.Fatalf("%d lines left behind", n)
	}
}

// A read-write lock's fences: a write grant's is above every earlier
// grant's, read or write; a read grant's above every earlier write
// grant's. Also the order of its line: readers that come while a writer
// waits get in after it, both on its one release.
func TestRWMutexFencesAndLineOrder(t *testing.T) {
	c, rdb, _ := setup(t)
	other := distlock.New(rdb)
	t.Cleanup(func() { other.Close() })
	ctx := ctxT(t, 15*time.Second)
	rw, _ := c.NewRWMutex("catalog")
	orw, _ := other.NewRWMutex("catalog")
	inLine := func(n int64) {
		t.Helper()
		waitFor(t, 5*time.Second, fmt.Sprintf("%d waiters in line", n), func() bool {
			return rdb.LLen(ctx, "distlock:rw{catalog}:line").Val() == n
		})
	}
	async := func(take func(context.Context, ...distlock.Option) (*distlock.Lock, error)) <-chan lockResult {
		out := make(chan lockResult, 1)
		go func() {
			l, err := take(ctx)
			out <- lockResult{l, err, time.Now()}
		}()
		return out
	}

	r1, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writer := async(orw.Lock)
	inLine(1)
	readers := []<-chan lockResult{async(orw.RLock), async(orw.RLock)}
	inLine(3)
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := recv(t, writer, 5*time.Second).l
	if w.Fence() <= r1.Fence() {
		t.Fatalf("write fence %d not above the earlier read's %d", w.Fence(), r1.Fence())
	}
	for _, r := range readers {
		select {
		case got := <-r:
			t.Fatalf("a reader got in while the writer held the lock: %v, %v", got.l, got.err)
		default:
		}
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var reads []*distlock.Lock
	for _, r := range readers { // both handed the lock by the one release
		got := recv(t, r, 5*time.Second)
		if got.l.Fence() <= w.Fence() {
			t.Fatalf("read fence %d not above the earlier write's %d", got.l.Fence(), w.Fence())
		}
		reads = append(reads, got.l)
	}
	writer = async(rw.Lock)
	inLine(1)
	for _, r := range reads {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w2 := recv(t, writer, 5*time.Second).l
	for _, r := range reads {
		if w2.Fence() <= r.Fence() {
			t.Fatalf("write fence %d not above the earlier read's %d", w2.Fence(), r.Fence())
		}
	}
	if err := w2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A leader whose renewals go unanswered (Redis frozen) has its context
// cancelled before its lease can run out in Redis, so before any other
// candidate can win; a Resign hands the leadership to the waiting
// candidate at once, with a higher term.
func TestElectionLossBeforeLeaseEndsAndResignHandsOver(t *testing.T) {
	c, rdb, srv := setup(t)
	other := distlock.New(srv.Client(t))
	t.Cleanup(func() { other.Close() })
	ctx := ctxT(t, 45*time.Second)
	e, _ := c.NewElection("sched")
	oe, _ := other.NewElection("sched")

	first, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan *distlock.Leadership, 1)
	go func() {
		l, err := oe.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		next <- l
	}()
	waitFor(t, 5*time.Second, "the candidate to line up", func() bool {
		return rdb.LLen(ctx, "distlock:elect{sched}:line").Val() == 1
	})
	resigned := time.Now()
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var second *distlock.Leadership
	select {
	case second = <-next:
		if second == nil {
			t.FailNow()
		}
	case <-time.After(time.Second): // far below the 10s lease a poll would wait out
		t.Fatal("the waiting candidate did not lead within 1s of the Resign")
	}
	t.Logf("next leader %v after the Resign", time.Since(resigned).Round(time.Millisecond))
	if second.Fence() <= first.Fence() {
		t.Fatalf("term %d after term %d", second.Fence(), first.Fence())
	}
	if err := second.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	const ttl = 10 * time.Second // drift margin 102ms, room for a loaded machine (see TestLostFiresBeforeServerExpiry)
	lead, err := e.Campaign(ctx, "c", distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	work, stop := lead.Context(ctx)
	defer stop()
	expiry, err := rdb.PExpireTime(ctx, "distlock:elect{sched}").Result()
	if err != nil || expiry <= 0 {
		t.Fatalf("PEXPIRETIME: %v, %v", expiry, err)
	}
	srv.Signal(syscall.SIGSTOP)
	defer srv.Signal(syscall.SIGCONT)
	select {
	case <-work.Done():
	case <-time.After(2 * ttl):
		t.Fatalf("the leader's context was not cancelled within %v of Redis freezing", 2*ttl)
	}
	lostAt := time.Now()
	srv.Signal(syscall.SIGCONT)
	if margin := time.UnixMilli(int64(expiry / time.Millisecond)).Sub(lostAt); margin <= 0 {
		t.Fatalf("the leader's context was cancelled %v after its lease ran out in Redis", -margin)
	}
	if !errors.Is(context.Cause(work), distlock.ErrUnreachable) || !errors.Is(lead.Err(), distlock.ErrLost) {
		t.Fatalf("cause %v, Err %v; want ErrUnreachable, matching ErrLost", context.Cause(work), lead.Err())
	}
}

// A MultiLock's one Context ends when any member is lost, with that
// member's cause; Release then frees the others and reports the lost one.
func TestMultiLockContextEndsWithAnyMember(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	const ttl = 600 * time.Millisecond
	m, err := c.TryLockAll(ctx, []string{"acct:1", "acct:2"}, distlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	work, stop := m.Context(ctx)
	defer stop()
	if _, err := c.ForceRelease(ctx, "acct:2", 0); err != nil {
		t.Fatal(err)
	}
	select {
	case <-work.Done():
	case <-time.After(2 * ttl):
		t.Fatal("the set's context was not cancelled within 2×ttl of a member's loss")
	}
	if !errors.Is(context.Cause(work), distlock.ErrExpired) {
		t.Fatalf("set's context cause %v, want the member's ErrExpired", context.Cause(work))
	}
	select {
	case <-m.Lost():
	case <-time.After(time.Second):
		t.Fatal("the set's Lost was not closed")
	}
	if !errors.Is(m.Err(), distlock.ErrLost) || !strings.Contains(m.Err().Error(), `"acct:2"`) {
		t.Fatalf("set's Err %v, want ErrLost naming acct:2", m.Err())
	}
	if err := m.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) || strings.Contains(err.Error(), `"acct:1"`) {
		t.Fatalf("Release after the loss: %v, want ErrNotHeld for acct:2 alone", err)
	}
	if rdb.Exists(ctx, "distlock:{acct:1}").Val() != 0 {
		t.Fatal("the member still held was not freed by Release")
	}
}

// An uncontended permit Acquire+Release is two script calls running 16
// commands, and the release reads the semaphore's limit only for a waiter:
// with nobody in line it costs no HGET (the acquire's check of the limit is
// the one).
func TestSemaphorePairCommands(t *testing.T) {
	c, rdb, _ := setup(t)
	ctx := ctxT(t, 10*time.Second)
	s, err := c.NewSemaphore("pair", 4)
	if err != nil {
		t.Fatal(err)
	}
	pair := func() {
		p, err := s.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pair() // loads the scripts: a first call is an EVALSHA Redis does not know, then an EVAL
	waitHolders(t, rdb, 1)
	before := commandStats(t, rdb)
	pair()
	after := commandStats(t, rdb)
	total := int64(0)
	for cmd, n := range after {
		if cmd != "info" {
			total += n - before[cmd]
		}
	}
	if d := after["evalsha"] - before["evalsha"]; d != 2 {
		t.Errorf("%d script calls, want 2", d)
	}
	if d := after["hget"] - before["hget"]; d != 1 {
		t.Errorf("%d HGETs, want 1 (the acquire's check of the limit)", d)
	}
	if total != 18 {
		t.Errorf("%d server commands (script calls included), want 18", total)
	}
}

// A fair campaign that finds the leader's lease run out hands the
// leadership to the candidate first in line, and says so on the election's
// channel, as every change of leader does: an observer that reported "no
// leader" hears of the new one.
func TestObserveSeesAFairCampaignsHandoff(t *testing.T) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 30*time.Second)
	e, _ := c.NewElection("e")
	watcher := distlock.New(srv.Client(t))
	t.Cleanup(func() { watcher.Close() })
	we, _ := watcher.NewElection("e")
	seen := we.Observe(ctx)
	next := func(what string) distlock.Leader {
		t.Helper()
		select {
		case l := <-seen:
			return l
		case <-time.After(3 * time.Second): // a's lease is 1 s
			t.Fatalf("Observe reported nothing: want %s", what)
		}
		return distlock.Leader{}
	}
	if l := next("no leader"); l.Elected() {
		t.Fatalf("first report %+v, want no leader", l)
	}
	a, err := e.Campaign(ctx, "a", distlock.WithoutRenewal(), distlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l := next("a"); l.Fence != a.Fence() {
		t.Fatalf("report %+v, want a", l)
	}
	// Candidate b waits in line, its Client listening, and asks again only
	// after c's attempt (here: never).
	sub := rdb.Subscribe(ctx, "distlock:elect{e}:to:clientB")
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	rdb.RPush(ctx, "distlock:elect{e}:line", "tokB clientB 10000 x 0 0:b")
	if l := next("a's end"); l.Elected() { // a's lease runs out
		t.Fatalf("report %+v, want no leader", l)
	}
	other := distlock.New(srv.Client(t))
	t.Cleanup(func() { other.Close() })
	oe, _ := other.NewElection("e")
	go func() { _, _ = oe.Campaign(ctx, "c", distlock.WithFair()) }() // hands the lead to b
	if l := next("b"); l.Value != "b" {
		t.Fatalf("report %+v, want b", l)
	}
}

// nextLeader returns the next value Observe sends, or fails after within.
func nextLeader(t *testing.T, ch <-chan distlock.Leader, within time.Duration) distlock.Leader {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatalf("Observe's channel closed")
		}
		return l
	case <-time.After(within):
		t.Fatalf("Observe sent nothing within %v", within)
	}
	return distlock.Leader{}
}

// TestObserveSeesProclaim: election.go's Observe "receives the
// leader now, then every change of leader or of its value, in order ...
// Changes are announced by the scripts that make them, over the Client's
// pub/sub subscription; a leader whose lease ran out is noticed when the
// lease ends." Proclaim is such a change (its doc: "observers see it"), and
// lua/proclaim.lua published "p" on "<lock>:released" for it, which
// notifier.deliver drops as a clear_gone ping, so an observer heard of a
// new value only when its lease timer (the leader's TTL) next fired; it
// publishes "v" now. With a 30 s lease the new value must still arrive within a
// couple of seconds, as a new leader does.
func TestObserveSeesProclaim(t *testing.T) {
	const ttl = 30 * time.Second
	c, _, _ := setup(t)
	ctx := ctxT(t, 60*time.Second)
	e, err := c.NewElection("proclaimed")
	must(t, err)
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs := e.Observe(octx)
	if l := nextLeader(t, obs, 5*time.Second); l.Elected() {
		t.Fatalf("first Observe value %+v, want no leader", l)
	}
	lead, err := e.Campaign(ctx, "v1", distlock.WithTTL(ttl))
	must(t, err)
	defer lead.Resign(context.Background())
	if l := nextLeader(t, obs, 5*time.Second); l.Value != "v1" {
		t.Fatalf("Observe after Campaign: %+v, want value v1", l)
	}
	proclaimed := time.Now()
	must(t, lead.Proclaim(ctx, "v2"))
	select {
	case l := <-obs:
		if l.Value != "v2" {
			t.Fatalf("Observe after Proclaim: %+v, want value v2", l)
		}
		t.Logf("Observe saw the new value %v after Proclaim", time.Since(proclaimed))
	case <-time.After(3 * time.Second):
		t.Fatalf("Observe did not report the proclaimed value within 3s (lease %v): the \"p\" notice was dropped", ttl)
	}
}
