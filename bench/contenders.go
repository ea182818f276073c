package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"time"

	"github.com/bsm/redislock"
	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
	zredis "github.com/zeromicro/go-zero/core/stores/redis"
)

// locker is one client of one library: what one process would hold.
type locker interface {
	// lock blocks until key is held or ctx ends and returns the release.
	lock(ctx context.Context, key string) (release func(context.Context) error, err error)
	close()
}

// contender is one library in one configuration.
type contender struct {
	lib, cfg string
	desc     string // what the configuration is, for the report
	peer     bool   // a peer library (not distlock, not the baseline)
	// onlyIn, when set, is the one scenario the row runs in: a reference
	// row that is no lock anyone would ship (the floor).
	onlyIn string
	// open returns a locker on the given nodes (one unless quorum) whose
	// leases last ttl.
	open func(addrs []string, ttl time.Duration) (locker, error)
	// contract reports whether err, from a lock call that failed after its
	// ctx ended with ctxErr, keeps the library's documented error contract;
	// nil for the libraries that document none.
	contract func(err, ctxErr error) bool
}

func (c contender) name() string { return c.lib + " " + c.cfg }

// runsIn says whether the row takes part in scenario.
func (c contender) runsIn(scenario string) bool { return c.onlyIn == "" || c.onlyIn == scenario }

// tunedDelay is the short retry delay of every "tuned" polling configuration.
const tunedDelay = time.Millisecond

// fairOption and newQuorum are set by fair.go and quorum.go when the library
// has those features, so that the bench builds against any library version.
var (
	fairOption func() distlock.Option
	newQuorum  func(rdbs []redis.UniversalClient) *distlock.Client
)

func goredisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}

func contenders() []contender {
	cs := []contender{
		{lib: "baseline", cfg: "1ms", desc: "SET NX PX + Lua compare-and-delete on go-redis, polling every 1ms", open: openBaseline},
		{lib: "floor", cfg: "fenced", onlyIn: "uncontended", desc: "the leanest fenced lock of two scripts on go-redis: INCR of a shared counter + SET NX PX; GET, compare, DEL (no reentrancy, metadata or waiting line)", open: openFloor},
		{lib: "distlock", cfg: "default", desc: "distlock.New(rdb), Client.Lock, default options", open: openDistlock(false), contract: distlockContract},
	}
	if fairOption != nil {
		cs = append(cs,
			contender{lib: "distlock-fair", cfg: "default", desc: "WithFair()", open: openDistlock(true), contract: distlockContract})
	}
	return append(cs,
		contender{lib: "redsync", cfg: "default", peer: true, desc: "goredis v9 pool, defaults (32 tries, 50-250ms delay; Lock retried on ErrFailed)", open: openRedsync(false)},
		contender{lib: "redsync", cfg: "tuned", peer: true, desc: "WithRetryDelay(1ms), WithTries(MaxInt32)", open: openRedsync(true)},
		contender{lib: "redislock", cfg: "default", peer: true, desc: "LinearBackoff(100ms) as in its README (its own default is NoRetry)", open: openRedislock(100 * time.Millisecond)},
		contender{lib: "redislock", cfg: "tuned", peer: true, desc: "LinearBackoff(1ms)", open: openRedislock(tunedDelay)},
		contender{lib: "go-zero", cfg: "default", peer: true, desc: "RedisLock.AcquireCtx in a 50ms sleep loop (it has no waiting API)", open: openGoZero(50*time.Millisecond, false)},
		contender{lib: "go-zero", cfg: "tuned", peer: true, desc: "RedisLock.AcquireCtx in a 1ms sleep loop", open: openGoZero(tunedDelay, true)},
		contender{lib: "rueidislock", cfg: "default", peer: true, desc: "NewLocker defaults (KeyMajority 2 of 3 keys, client-side-caching wake-ups)", open: openRueidis(false)},
		contender{lib: "rueidislock", cfg: "tuned", peer: true, desc: "KeyMajority 1, NoLoopTracking", open: openRueidis(true)},
	)
}

// --- distlock ---

type distlockLocker struct {
	rdbs []redis.UniversalClient
	c    *distlock.Client
	opts []distlock.Option
}

// openDistlock has no tuned variant: distlock has no retry delay to tune
// (waiters are handed the lock; they never poll).
func openDistlock(fair bool) func([]string, time.Duration) (locker, error) {
	return func(addrs []string, ttl time.Duration) (locker, error) {
		l := &distlockLocker{opts: []distlock.Option{distlock.WithTTL(ttl)}}
		for _, a := range addrs {
			l.rdbs = append(l.rdbs, goredisClient(a))
		}
		if len(addrs) == 1 {
			l.c = distlock.New(l.rdbs[0])
		} else {
			if newQuorum == nil {
				return nil, errors.New("distlock has no NewQuorum yet")
			}
			l.c = newQuorum(l.rdbs)
		}
		if fair {
			l.opts = append(l.opts, fairOption())
		}
		return l, nil
	}
}

func (l *distlockLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	lk, err := l.c.Lock(ctx, key, l.opts...)
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

// distlockContract is the README's promise: a Lock that fails because its ctx
// ended wraps the ctx's error and ErrNotObtained (or ErrNoAnswer, when its
// ctx ended before Redis answered its first request).
func distlockContract(err, ctxErr error) bool {
	return (errors.Is(err, distlock.ErrNotObtained) || errors.Is(err, distlock.ErrNoAnswer)) && errors.Is(err, ctxErr)
}

func (l *distlockLocker) close() {
	_ = l.c.Close()
	for _, r := range l.rdbs {
		_ = r.Close()
	}
}

// --- redsync ---

type redsyncLocker struct {
	rdbs []*redis.Client
	rs   *redsync.Redsync
	opts []redsync.Option
}

func openRedsync(tuned bool) func([]string, time.Duration) (locker, error) {
	return func(addrs []string, ttl time.Duration) (locker, error) {
		l := &redsyncLocker{opts: []redsync.Option{redsync.WithExpiry(ttl)}}
		var pools []rsredis.Pool
		for _, a := range addrs {
			c := goredisClient(a)
			l.rdbs = append(l.rdbs, c)
			pools = append(pools, goredis.NewPool(c))
		}
		l.rs = redsync.New(pools...)
		if tuned {
			l.opts = append(l.opts, redsync.WithRetryDelay(tunedDelay), redsync.WithTries(math.MaxInt32))
		}
		return l, nil
	}
}

func (l *redsyncLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	for {
		// A Mutex holds one grant's value, so each Lock call gets its own.
		m := l.rs.NewMutex(key, l.opts...)
		err := m.LockContext(ctx)
		if err == nil {
			return func(ctx context.Context) error {
				ok, err := m.UnlockContext(ctx)
				if err == nil && !ok {
					err = errors.New("redsync: unlock reported not held")
				}
				return err
			}, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var taken *redsync.ErrTaken
		var takenV redsync.ErrTaken
		if !errors.Is(err, redsync.ErrFailed) && !errors.As(err, &taken) && !errors.As(err, &takenV) {
			return nil, err
		}
		// redsync gives up after its tries; a waiting caller calls it again.
	}
}

func (l *redsyncLocker) close() {
	for _, r := range l.rdbs {
		_ = r.Close()
	}
}

// --- bsm/redislock ---

type redislockLocker struct {
	rdb *redis.Client
	c   *redislock.Client
	ttl time.Duration
	opt *redislock.Options
}

func openRedislock(delay time.Duration) func([]string, time.Duration) (locker, error) {
	return func(addrs []string, ttl time.Duration) (locker, error) {
		rdb := goredisClient(addrs[0])
		return &redislockLocker{rdb: rdb, c: redislock.New(rdb), ttl: ttl,
			opt: &redislock.Options{RetryStrategy: redislock.LinearBackoff(delay)}}, nil
	}
}

func (l *redislockLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	for {
		lk, err := l.c.Obtain(ctx, key, l.ttl, l.opt)
		if err == nil {
			return lk.Release, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// Obtain stops retrying after ttl when ctx has no deadline, and
		// returns ErrNotObtained or that deadline's error; a waiting caller
		// calls it again.
		if !errors.Is(err, redislock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
	}
}

func (l *redislockLocker) close() { _ = l.rdb.Close() }

// --- go-zero ---

type goZeroLocker struct {
	store *zredis.Redis
	secs  int
	delay time.Duration
}

// openGoZero: go-zero keeps one go-redis client and one circuit breaker per
// address string for the whole process. Its breaker trips under deadline
// churn (deadline errors count as failures) and stays open for seconds, so
// the tuned configuration spells the same loopback address differently
// (IPv4-mapped IPv6) to get a breaker of its own, as a separate process
// would, instead of inheriting the default configuration's open breaker.
func openGoZero(delay time.Duration, ownBreaker bool) func([]string, time.Duration) (locker, error) {
	return func(addrs []string, ttl time.Duration) (locker, error) {
		addr := addrs[0]
		if host, port, err := net.SplitHostPort(addr); ownBreaker && err == nil {
			addr = net.JoinHostPort("::ffff:"+host, port)
		}
		// go-zero's lease is SetExpire seconds + 500ms.
		secs := int(max(0, (ttl-500*time.Millisecond)/time.Second))
		return &goZeroLocker{store: zredis.New(addr), secs: secs, delay: delay}, nil
	}
}

func (l *goZeroLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	rl := zredis.NewRedisLock(l.store, key)
	rl.SetExpire(l.secs)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		ok, err := rl.AcquireCtx(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			return func(ctx context.Context) error {
				ok, err := rl.ReleaseCtx(ctx)
				if err == nil && !ok {
					err = errors.New("go-zero: release reported not held")
				}
				return err
			}, nil
		}
		t.Reset(l.delay)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// go-zero shares one connection pool per address process-wide and has no
// Close; nothing to do.
func (l *goZeroLocker) close() {}

// --- rueidislock ---

type rueidisLocker struct{ l rueidislock.Locker }

func openRueidis(tuned bool) func([]string, time.Duration) (locker, error) {
	return func(addrs []string, ttl time.Duration) (locker, error) {
		opt := rueidislock.LockerOption{
			ClientOption: rueidis.ClientOption{InitAddress: addrs[:1]},
			KeyValidity:  ttl,
		}
		if tuned {
			opt.KeyMajority = 1
			opt.NoLoopTracking = true
		}
		l, err := rueidislock.NewLocker(opt)
		if err != nil {
			return nil, err
		}
		return &rueidisLocker{l: l}, nil
	}
}

// lock waits under ctx but holds the lock until release, like every other
// locker. rueidislock ties the hold to the context it waits under (the lock
// is given back when that context ends), so a Lock with a deadline would
// lose the lock mid-work once the deadline passes; the hold context is
// therefore detached from ctx and cancelled by ctx only while waiting.
func (l *rueidisLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	hold, stopHold := context.WithCancel(context.WithoutCancel(ctx))
	stopWaiting := context.AfterFunc(ctx, stopHold)
	_, cancel, err := l.l.WithContext(hold, key)
	if err != nil {
		stopWaiting()
		stopHold()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if !stopWaiting() { // ctx ended as the lock was granted: give it back
		cancel()
		stopHold()
		return nil, ctx.Err()
	}
	// cancel deletes the keys and returns once they are deleted.
	return func(context.Context) error { cancel(); stopHold(); return nil }, nil
}

func (l *rueidisLocker) close() { l.l.Close() }

// --- baseline ---

var baselineRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

type baselineLocker struct {
	rdb *redis.Client
	ttl time.Duration
}

func openBaseline(addrs []string, ttl time.Duration) (locker, error) {
	return &baselineLocker{rdb: goredisClient(addrs[0]), ttl: ttl}, nil
}

func (l *baselineLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	token := newToken()
	err := poll(ctx, func() (bool, error) {
		err := l.rdb.Do(ctx, "SET", key, token, "NX", "PX", l.ttl.Milliseconds()).Err()
		if err == redis.Nil {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return nil, err
	}
	return casRelease("baseline", baselineRelease, l.rdb, []string{key}, token), nil
}

// poll calls try until it takes the lock, tunedDelay apart, or ctx ends.
func poll(ctx context.Context, try func() (bool, error)) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		if ok, err := try(); ok || err != nil {
			return err
		}
		t.Reset(tunedDelay)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// casRelease is the release of a lock of lib held by token: script deletes
// keys[0] if token still holds it, and answers 1 if it did.
func casRelease(lib string, script *redis.Script, rdb *redis.Client, keys []string, token string) func(context.Context) error {
	return func(ctx context.Context) error {
		n, err := script.Run(ctx, rdb, keys, token).Int64()
		if err == nil && n != 1 {
			err = fmt.Errorf("%s: release of %q found it not held", lib, keys[0])
		}
		return err
	}
}

func (l *baselineLocker) close() { _ = l.rdb.Close() }

// --- floor ---

// The floor (redistest.FloorAcquire, FloorRelease) is what any lock that
// mints its fence inside its acquire script pays at least. distlock's
// uncontended pair is judged against the baseline, and shown beside this
// row to tell its own cost from the fence's.
type floorLocker struct{ baselineLocker }

func openFloor(addrs []string, ttl time.Duration) (locker, error) {
	return &floorLocker{baselineLocker{rdb: goredisClient(addrs[0]), ttl: ttl}}, nil
}

func (l *floorLocker) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	token := newToken()
	keys := []string{key, "floor:fence"}
	err := poll(ctx, func() (bool, error) {
		fence, err := redistest.FloorAcquire.Run(ctx, l.rdb, keys, token, l.ttl.Milliseconds()).Int64()
		return fence > 0, err
	})
	if err != nil {
		return nil, err
	}
	return casRelease("floor", redistest.FloorRelease, l.rdb, keys[:1], token), nil
}
