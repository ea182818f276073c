package distlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Mutex adapts one lock key to sync.Locker for code written against it.
//
// Within its process a Mutex is a sync.Mutex too: its goroutines take it one
// at a time, from Lock to Unlock, even when a holder's lease runs out, so a
// lost lease lets in other processes, never another goroutine of this
// Mutex, and Unlock releases only the grant that its Lock took.
//
// The trade-off: sync.Locker has no context and no error. Lock therefore
// blocks until the lock is held, retrying Redis errors with backoff; it
// panics only when the Client is closed, since it could never succeed. Unlock
// panics when the Mutex is not locked, like sync.Mutex; a Redis error during
// Unlock is dropped because the lease expires on its own. Code that can
// handle errors or must know when the lease is lost should use Client.Lock
// and Lock.Lost instead.
type Mutex struct {
	client *Client
	key    string
	opts   []Option

	// local is held from Lock to Unlock: goroutines queue here rather than
	// in Redis, and a later holder's grant is never the one Unlock releases.
	local sync.Mutex
	held  atomic.Pointer[Lock]
}

// NewMutex returns a Mutex on key, validating key and options now so that
// Lock cannot fail on bad input later (ErrInvalidKey, ErrInvalidTTL,
// ErrInvalidOption, ErrClosed, ErrNilClient).
func (c *Client) NewMutex(key string, opts ...Option) (*Mutex, error) {
	if _, err := c.request(mutexKind, key, opts, true); err != nil {
		return nil, err
	}
	return &Mutex{client: c, key: key, opts: opts}, nil
}

// Lock blocks until the lock is held.
func (m *Mutex) Lock() {
	m.local.Lock()
	for n := 0; ; n++ {
		l, err := m.client.Lock(context.Background(), m.key, m.opts...)
		if err == nil {
			m.held.Store(l)
			return
		}
		if m.client.usable() != nil {
			m.local.Unlock()
			panic("distlock: Mutex.Lock on a closed Client")
		}
		// A Redis error: back off (10ms doubling to 1s) and try again.
		time.Sleep(10 * time.Millisecond << min(n, 7))
	}
}

// Unlock releases the lock.
func (m *Mutex) Unlock() {
	l := m.held.Swap(nil)
	if l == nil {
		panic("distlock: unlock of unlocked Mutex")
	}
	_ = l.Release(context.Background())
	m.local.Unlock()
}

var _ sync.Locker = (*Mutex)(nil)
