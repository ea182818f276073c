package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/distlock/distlock"
	"github.com/redis/go-redis/v9"
)

// defaultRedisURL is used without --redis and DISTLOCK_REDIS_URL.
const defaultRedisURL = "redis://localhost:6379"

// connHelp documents the connection flags in every command's help.
const connHelp = `Connection flags:
  --redis URL        Redis to use; default $DISTLOCK_REDIS_URL, else
                     redis://localhost:6379. 'distlock help urls' lists the
                     forms: rediss:// (TLS), USER:PASSWORD@ (ACL),
                     redis-sentinel://, redis-cluster://. Prefer the variable
                     for URLs with passwords: flags show up in ps(1).
  --tls-ca FILE      PEM CA certificates to verify the server's TLS
                     certificate, instead of the system roots
                     ($DISTLOCK_TLS_CA)
  --tls-cert FILE    PEM client certificate for servers that require one
  --tls-key FILE     ... and its private key ($DISTLOCK_TLS_CERT,
                     $DISTLOCK_TLS_KEY)
  --prefix PREFIX    prefix of distlock's Redis keys; default "distlock:"
                     ($DISTLOCK_PREFIX)
`

func init() {
	// go-redis logs dial retries on its own; distlock reports the error that
	// results, once, with a hint.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, " ") }

func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// connFlags are the connection flags every command takes.
type connFlags struct {
	urls    stringList
	tlsCA   string
	tlsCert string
	tlsKey  string
	prefix  string
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.Var(&c.urls, "redis", "")
	fs.StringVar(&c.tlsCA, "tls-ca", os.Getenv("DISTLOCK_TLS_CA"), "")
	fs.StringVar(&c.tlsCert, "tls-cert", os.Getenv("DISTLOCK_TLS_CERT"), "")
	fs.StringVar(&c.tlsKey, "tls-key", os.Getenv("DISTLOCK_TLS_KEY"), "")
	prefix, ok := os.LookupEnv("DISTLOCK_PREFIX")
	if !ok {
		prefix = distlock.DefaultPrefix
	}
	fs.StringVar(&c.prefix, "prefix", prefix, "")
}

// targets parses the URLs from the flags, else the environment (where
// several URLs for --quorum are separated by spaces), else the default.
func (c *connFlags) targets() ([]*target, error) {
	urls := []string(c.urls)
	if len(urls) == 0 {
		urls = strings.Fields(os.Getenv("DISTLOCK_REDIS_URL"))
	}
	if len(urls) == 0 {
		urls = []string{defaultRedisURL}
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, usagef("--tls-cert and --tls-key go together")
	}
	var tlsExtra func(*tls.Config) error
	if c.tlsCA != "" || c.tlsCert != "" {
		tlsExtra = c.applyTLS
	}
	targets := make([]*target, 0, len(urls))
	for _, u := range urls {
		t, err := parseRedisURL(u)
		if err != nil {
			return nil, &usageError{err.Error()}
		}
		if tlsExtra != nil {
			cfg := t.tlsConfig()
			if cfg == nil {
				return nil, usagef("--tls-ca/--tls-cert given, but %q does not use TLS: use rediss://", redact(u))
			}
			if err := tlsExtra(cfg); err != nil {
				return nil, err
			}
		}
		targets = append(targets, t)
	}
	return targets, nil
}

func (c *connFlags) applyTLS(cfg *tls.Config) error {
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return usagef("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return usagef("--tls-ca: no PEM certificate in %s", c.tlsCA)
		}
		cfg.RootCAs = pool
	}
	if c.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return usagef("--tls-cert/--tls-key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return nil
}

// connection is an open distlock Client and what it runs on.
type connection struct {
	locks   *distlock.Client
	rdbs    []redis.UniversalClient
	targets []*target
}

// open connects to the one Redis deployment the flags name.
func (c *connFlags) open(opts ...distlock.ClientOption) (*connection, error) {
	targets, err := c.targets()
	if err != nil {
		return nil, err
	}
	if len(targets) > 1 {
		return nil, usagef("%d Redis URLs given: several --redis need --quorum (run only)", len(targets))
	}
	rdb := targets[0].client()
	return &connection{
		locks:   distlock.New(rdb, append([]distlock.ClientOption{distlock.WithKeyPrefix(c.prefix)}, opts...)...),
		rdbs:    []redis.UniversalClient{rdb},
		targets: targets,
	}, nil
}

// minQuorum is the fewest servers --quorum accepts: with fewer, losing any
// one server blocks every lock.
const minQuorum = 3

// openQuorum connects to independent servers for a majority lock.
func (c *connFlags) openQuorum(opts ...distlock.ClientOption) (*connection, error) {
	targets, err := c.targets()
	if err != nil {
		return nil, err
	}
	if len(targets) < minQuorum {
		return nil, usagef("--quorum needs at least %d independent Redis servers (several --redis, or space-separated URLs in DISTLOCK_REDIS_URL), got %d", minQuorum, len(targets))
	}
	rdbs := make([]redis.UniversalClient, len(targets))
	for i, t := range targets {
		rdbs[i] = t.client()
	}
	return &connection{
		locks:   distlock.NewQuorum(rdbs, append([]distlock.ClientOption{distlock.WithKeyPrefix(c.prefix)}, opts...)...),
		rdbs:    rdbs,
		targets: targets,
	}, nil
}

func (c *connection) Close() {
	c.locks.Close()
	for _, r := range c.rdbs {
		_ = r.Close()
	}
}

// abandon closes c at once, also with calls stuck on a Redis that takes
// them and never answers: the Redis clients go first, which ends such
// calls, since a cancel does not (url.go). Closed the other way round, the
// library's Close would wait for its background calls (Observe's lookups)
// up to its own bound, seconds. A later Close does nothing more.
func (c *connection) abandon() {
	for _, r := range c.rdbs {
		_ = r.Close()
	}
	c.locks.Close()
}

// where names the Redis deployment for error messages.
// tls tells whether the connection is made over TLS.
func (c *connection) tls() bool {
	for _, t := range c.targets {
		if t.tlsConfig() != nil {
			return true
		}
	}
	return false
}

// ping tells whether Redis answers within a second: the check behind a
// wait's end, which is no news of Redis (waiters are woken, they do not
// poll).
func (c *connection) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.rdbs[0].Ping(ctx).Err()
}

// pingMajority is ping for a quorum: nil when a majority of its servers
// answers within a second.
func (c *connection) pingMajority() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	errs := make(chan error, len(c.rdbs))
	for _, rdb := range c.rdbs {
		go func() { errs <- rdb.Ping(ctx).Err() }()
	}
	var failed []error
	for range c.rdbs {
		if err := <-errs; err != nil {
			failed = append(failed, err)
		}
	}
	if len(c.rdbs)-len(failed) > len(c.rdbs)/2 {
		return nil
	}
	return errors.Join(failed...)
}

func (c *connection) where() string {
	names := make([]string, len(c.targets))
	for i, t := range c.targets {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}

// failCall reports err from a call on c for command name: an option the
// library refused (ErrInvalidOption: a --prefix it cannot use) is bad
// usage, as run and leader report it, not a Redis failure; anything else
// is, explained by redisError.
func (c *connection) failCall(stderr io.Writer, name string, err error) int {
	if errors.Is(err, distlock.ErrInvalidOption) {
		return fail(stderr, name, err, exitUsage)
	}
	return fail(stderr, name, c.redisError(err), exitRedis)
}

// timedOut reports a timeout in err's chain, such as a quorum node that did
// not answer within its call's decision wait.
func timedOut(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// redisError explains a Redis failure and what to check.
func (c *connection) redisError(err error) error {
	hint := "check --redis or DISTLOCK_REDIS_URL"
	var tlsErr *tls.CertificateVerificationError
	switch msg := err.Error(); {
	case errors.As(err, &tlsErr) || strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:"):
		hint = "TLS failed: check --tls-ca (or DISTLOCK_TLS_CA) and the server certificate"
	case c.tls() && (errors.Is(err, context.DeadlineExceeded) || timedOut(err) || strings.Contains(msg, "i/o timeout")):
		// A plain-text server leaves a TLS handshake unanswered until the
		// dial times out.
		hint = "no answer over TLS: is the server's port a TLS port? rediss:// URLs need one; redis:// is plain text"
	case strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "NOPERM"):
		hint = "authentication or ACL failed: check USER:PASSWORD in the URL and the user's ACL (distlock needs EVAL, EVALSHA and the commands its scripts call)"
	}
	return fmt.Errorf("Redis at %s: %s\n(%s)", c.where(), strings.TrimPrefix(err.Error(), "distlock: "), hint)
}
