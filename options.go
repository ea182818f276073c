package distlock

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

const (
	// DefaultTTL is the lease of a lock taken without WithTTL. With renewal on
	// (the default) it bounds how long a crashed holder blocks others.
	DefaultTTL = 10 * time.Second
	// MinTTL is the shortest lease accepted: a lease must outlast the margin
	// kept for clock drift (1% of it plus 2ms), or no grant could be held.
	MinTTL = 3 * time.Millisecond
	// MinRenewedTTL is the shortest lease of a lock that is renewed (without
	// WithoutRenewal): a renewal must reach Redis with more of the lease
	// left than its guard, the drift margin twice and a round trip, or it is
	// refused and the lock lost: leases under 10 ms were lost at their first
	// TTL even on a loopback Redis, and a renewal that a loaded machine
	// sends a few milliseconds late must still pass.
	MinRenewedTTL = 50 * time.Millisecond
	// MaxTTL is the longest lease accepted; longer work should rely on renewal.
	MaxTTL = 24 * time.Hour
	// MaxKeyLen is the longest lock key accepted, in bytes.
	MaxKeyLen = 1024
	// DefaultPrefix starts the name of every Redis key distlock writes.
	DefaultPrefix = "distlock:"
	// maxMetadataLen bounds what each lock stores for status tools.
	maxMetadataLen = 4096
)

// ClientOption configures a Client (New, NewQuorum).
type ClientOption func(*clientConfig)

type clientConfig struct {
	prefix    string
	ack       replicaAck
	observers []Observer
}

// WithKeyPrefix replaces DefaultPrefix, to keep applications sharing one Redis
// apart. On a Cluster a '{' in prefix must open a whole, non-empty hash tag
// ("app{locks}:", which puts every lock in that tag's slot), or the Client's
// methods return ErrInvalidOption. So they do for a prefix that ends with
// "rw", "sem" or "elect": a read-write lock's, a semaphore's and an
// election's keys put that after the prefix, and prefix "app" would share
// its read-write locks' keys with prefix "apprw"'s locks. On a Cluster so
// they do for a prefix that ends with "fence:": the fence counter of each
// slot is the prefix, "fence:" and a hash tag, so prefix "app:fence:" would
// name its lock "0" as the counter of prefix "app:". End a prefix with a
// ':' as DefaultPrefix does.
func WithKeyPrefix(prefix string) ClientOption {
	return func(c *clientConfig) { c.prefix = prefix }
}

// prefixClash returns ErrInvalidOption for a prefix that ends with a kind's
// part of a key (see WithKeyPrefix).
func prefixClash(prefix string) error {
	for _, k := range []*kind{leaderKind, readKind, permitKind} {
		if strings.HasSuffix(prefix, k.prefix) {
			return fmt.Errorf("%w: key prefix %q ends with %q, which the keys of a %s put after the prefix: they would be the keys of prefix %q",
				ErrInvalidOption, prefix, k.prefix, k.primitive, strings.TrimSuffix(prefix, k.prefix))
		}
	}
	return nil
}

func buildClientConfig(opts []ClientOption) clientConfig {
	cfg := clientConfig{prefix: DefaultPrefix}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return cfg
}

// Option configures one TryLock or Lock call.
type Option func(*lockConfig)

type lockConfig struct {
	ttl      time.Duration
	meta     string
	metaSet  bool
	owner    string // "" unless WithOwner
	ownerSet bool
	noRenew  bool
	fair     bool
}

// WithTTL sets the lease: how long the lock outlives a holder that stops
// renewing it. Default DefaultTTL; must be in [MinTTL, MaxTTL], and at
// least MinRenewedTTL unless WithoutRenewal.
func WithTTL(ttl time.Duration) Option {
	return func(c *lockConfig) { c.ttl = ttl }
}

// WithMetadata stores a string with the lock for status tools; by default
// "host=<hostname> pid=<pid>". At most 4096 bytes.
func WithMetadata(meta string) Option {
	return func(c *lockConfig) { c.meta, c.metaSet = meta, true }
}

// WithOwner makes the lock reentrant for owner, a non-empty id of at most
// MaxKeyLen bytes: a lock held under the same owner id, by this process or
// another, is taken again as one more hold, and each Lock of it releases its
// own hold. Without it a lock is not reentrant.
func WithOwner(owner string) Option {
	return func(c *lockConfig) { c.owner = owner; c.ownerSet = true }
}

// WithoutRenewal keeps the lease fixed: the lock is not renewed and is lost
// when its TTL runs out (Lost fires at the local validity deadline).
func WithoutRenewal() Option {
	return func(c *lockConfig) { c.noRenew = true }
}

// WithFair makes Lock wait in arrival order: a free lock is never taken
// ahead of a waiter in line. A TryLock with it that finds a free lock with
// waiters in line hands it to the first of them and returns ErrNotObtained.
// Use it for every Lock call on a key that needs the order. A quorum Client
// refuses it with ErrInvalidOption.
func WithFair() Option {
	return func(c *lockConfig) { c.fair = true }
}

// build sets cfg from opts over the defaults.
func (cfg *lockConfig) build(opts []Option) error {
	*cfg = lockConfig{ttl: DefaultTTL}
	for _, o := range opts {
		if o != nil {
			o(cfg)
		}
	}
	if err := checkTTL(cfg.ttl, !cfg.noRenew); err != nil {
		return err
	}
	if cfg.ownerSet && (cfg.owner == "" || len(cfg.owner) > MaxKeyLen) {
		return fmt.Errorf("%w: owner id must be 1 to %d bytes", ErrInvalidOption, MaxKeyLen)
	}
	if len(cfg.meta) > maxMetadataLen {
		return fmt.Errorf("%w: metadata longer than %d bytes", ErrInvalidOption, maxMetadataLen)
	}
	if !cfg.metaSet {
		cfg.meta = processMetadata
	}
	return nil
}

// checkTTL returns ErrInvalidTTL for a lease outside [MinTTL, MaxTTL], or
// below MinRenewedTTL for a lock that is renewed.
func checkTTL(ttl time.Duration, renewed bool) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: %v is outside [%v, %v]", ErrInvalidTTL, ttl, MinTTL, MaxTTL)
	}
	if renewed && ttl < MinRenewedTTL {
		return fmt.Errorf("%w: %v is below %v, the shortest lease that renewal can keep (use WithoutRenewal)", ErrInvalidTTL, ttl, MinRenewedTTL)
	}
	return nil
}

var processMetadata = func() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return "host=" + host + " pid=" + strconv.Itoa(os.Getpid())
}()

func validateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key must be 1 to %d bytes, got %d", ErrInvalidKey, MaxKeyLen, len(key))
	}
	return nil
}
