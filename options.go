package distlock

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

const (
	// DefaultTTL is the lease of a lock taken without WithTTL. With renewal on
	// (the default) it bounds how long a crashed holder blocks others.
	DefaultTTL = 10 * time.Second
	// MaxTTL is the longest lease accepted; longer work should rely on renewal.
	MaxTTL = 24 * time.Hour
	// MaxKeyLen is the longest lock key accepted, in bytes.
	MaxKeyLen = 1024
	// maxMetadataLen bounds what each lock stores for status tools.
	maxMetadataLen = 4096
)

// Option configures one TryLock or Lock call.
type Option func(*lockConfig)

type lockConfig struct {
	ttl      time.Duration
	retry    RetryStrategy
	meta     string
	metaSet  bool
	owner    string
	noRenew  bool
	fair     bool
	ownerSet bool
}

// WithTTL sets the lease: how long the lock outlives a holder that stops
// renewing it. Default DefaultTTL; must be in [1ms, MaxTTL].
func WithTTL(ttl time.Duration) Option {
	return func(c *lockConfig) { c.ttl = ttl }
}

// WithRetry sets how Lock waits between attempts. TryLock ignores it.
func WithRetry(s RetryStrategy) Option {
	return func(c *lockConfig) { c.retry = s }
}

// WithMetadata stores a string with the lock for status tools; by default
// "host=<hostname> pid=<pid>".
func WithMetadata(meta string) Option {
	return func(c *lockConfig) { c.meta, c.metaSet = meta, true }
}

// WithOwner makes the lock reentrant for owner: a lock held under the same
// owner id, by this process or another, is taken again by incrementing its
// hold count. Without it a lock is not reentrant.
func WithOwner(owner string) Option {
	return func(c *lockConfig) { c.owner, c.ownerSet = owner, true }
}

func defaultLockConfig() lockConfig {
	return lockConfig{ttl: DefaultTTL, retry: defaultRetry}
}

func buildLockConfig(opts []Option) (lockConfig, error) {
	cfg := defaultLockConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.ttl < time.Millisecond || cfg.ttl > MaxTTL {
		return cfg, fmt.Errorf("%w: %v is outside [1ms, %v]", ErrInvalidTTL, cfg.ttl, MaxTTL)
	}
	if cfg.retry == nil {
		return cfg, fmt.Errorf("%w: nil retry strategy", ErrInvalidOption)
	}
	if cfg.ownerSet && (cfg.owner == "" || len(cfg.owner) > MaxKeyLen) {
		return cfg, fmt.Errorf("%w: owner id must be 1 to %d bytes", ErrInvalidOption, MaxKeyLen)
	}
	if len(cfg.meta) > maxMetadataLen {
		return cfg, fmt.Errorf("%w: metadata longer than %d bytes", ErrInvalidOption, maxMetadataLen)
	}
	if !cfg.metaSet {
		cfg.meta = processMetadata
	}
	return cfg, nil
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

// ClientOption configures a Client.
type ClientOption func(*Client)

// DefaultPrefix starts the name of every Redis key distlock writes.
const DefaultPrefix = "distlock:"

// WithKeyPrefix replaces DefaultPrefix, to keep applications sharing one Redis
// apart.
func WithKeyPrefix(prefix string) ClientOption {
	return func(c *Client) { c.prefix = prefix }
}

// WithoutRenewal keeps the lease fixed: the lock is not renewed and is lost
// when its TTL runs out (Lost fires at the local validity deadline).
func WithoutRenewal() Option {
	return func(c *lockConfig) { c.noRenew = true }
}

// WithFair makes Lock wait in arrival order: waiters line up in Redis and a
// release hands the lock straight to the first one still waiting. A waiter
// that gives up leaves the line at once; one that dies is skipped within
// two seconds. Use it for every Lock call on a key that needs the order.
func WithFair() Option {
	return func(c *lockConfig) { c.fair = true }
}

// ownerArgs returns the value Redis compares on release (the token, or the
// WithOwner id) and the reentrancy flag for the acquire scripts.
func (c lockConfig) ownerArgs(token string) (owner, reentrant string) {
	if c.ownerSet {
		return c.owner, "1"
	}
	return token, "0"
}
