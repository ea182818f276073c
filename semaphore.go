package distlock

import (
	"context"
	"fmt"
	"strconv"
)

// Semaphore lets up to n holders hold a name at once, like consul lock -n,
// Redisson's permit-expirable semaphore or Curator's SemaphoreV2. Each
// permit is a *Lock of its own: a lease that the Client renews, with a loss
// signal (Lost, Context), a fence, Release and Extend; a holder that dies
// frees its permit when its lease runs out. Waiters line up in Redis and a
// released permit is handed to the first of them, in arrival order,
// without polling.
//
// The limit is fixed per name while the semaphore is in use: asking for a
// permit with another limit fails with ErrInvalidOption. When every permit
// is released, nothing is left in Redis and the limit is forgotten.
type Semaphore struct {
	c     *Client
	name  string
	limit any // n, as a script argument
	n     int
}

// NewSemaphore returns the semaphore name with n permits. It returns
// ErrInvalidKey for a bad name, ErrInvalidOption for n < 1 or on a quorum
// Client (a semaphore's holders cannot be counted across independent
// nodes), and ErrClosed or ErrNilClient.
func (c *Client) NewSemaphore(name string, n int) (*Semaphore, error) {
	if err := c.checkPrimitive(permitKind, name); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("%w: a semaphore needs at least 1 permit, got %d", ErrInvalidOption, n)
	}
	return &Semaphore{c: c, name: name, n: n, limit: strconv.Itoa(n)}, nil
}

// Acquire takes a permit, waiting in line until one is handed over or ctx
// ends. Options are those of Client.Lock (WithTTL, WithMetadata,
// WithoutRenewal); WithOwner is refused. Errors are as for Client.Lock,
// and ErrLimitMismatch (an ErrInvalidOption) when the semaphore is in use
// with another limit.
func (s *Semaphore) Acquire(ctx context.Context, opts ...Option) (*Lock, error) {
	return s.acquire(ctx, opts, true)
}

// TryAcquire takes a permit if one is free and nobody waits for one;
// otherwise it returns ErrNotObtained at once.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...Option) (*Lock, error) {
	return s.acquire(ctx, opts, false)
}

func (s *Semaphore) acquire(ctx context.Context, opts []Option, wait bool) (*Lock, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	if s == nil {
		return nil, ErrNilClient
	}
	r, err := s.c.request(permitKind, s.name, opts, wait)
	if err != nil {
		return nil, s.c.refused(ctx, s.name, err)
	}
	r.acquireArg, r.releaseArg = s.limit, s.limit
	return s.c.acquire(ctx, r)
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// Limit returns the number of permits.
func (s *Semaphore) Limit() int {
	if s == nil {
		return 0
	}
	return s.n
}
