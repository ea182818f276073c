package distlock

import "context"

// RWMutex is a read-write lock: many readers or one writer at a time. Each
// hold, read or write, is a *Lock of its own: a lease that the Client
// renews, with a loss signal, a fence, Release and Extend; a reader that
// dies frees its share when its own lease runs out, not when the last
// reader's does.
//
// Waiters line up in arrival order: a reader that comes while a writer
// waits queues behind it, so a steady stream of readers cannot starve a
// writer; a release hands the lock to the writer at the head of the line,
// or to all the readers there.
//
// Fences: every grant draws a fence, so a write grant's fence is greater
// than that of every earlier grant of the lock, read or write. A read
// grant's fence is greater than that of every earlier write grant: a
// resource can refuse a reader that began before the last writer it saw.
// Readers' fences say nothing about each other.
type RWMutex struct {
	c    *Client
	name string
}

// NewRWMutex returns the read-write lock name. It returns ErrInvalidKey for
// a bad name, ErrInvalidOption on a quorum Client, and ErrClosed or
// ErrNilClient.
func (c *Client) NewRWMutex(name string) (*RWMutex, error) {
	if err := c.checkPrimitive(readKind, name); err != nil {
		return nil, err
	}
	return &RWMutex{c: c, name: name}, nil
}

// RLock takes a read hold, waiting until no writer holds the lock or waits
// ahead, or ctx ends. Options and errors are as for Client.Lock; WithOwner
// is refused.
func (rw *RWMutex) RLock(ctx context.Context, opts ...Option) (*Lock, error) {
	return rw.acquire(ctx, readKind, opts, true)
}

// TryRLock takes a read hold if it can at once, else returns
// ErrNotObtained.
func (rw *RWMutex) TryRLock(ctx context.Context, opts ...Option) (*Lock, error) {
	return rw.acquire(ctx, readKind, opts, false)
}

// Lock takes the write hold, waiting until nobody holds the lock or waits
// ahead, or ctx ends. Options and errors are as for Client.Lock; WithOwner
// is refused.
func (rw *RWMutex) Lock(ctx context.Context, opts ...Option) (*Lock, error) {
	return rw.acquire(ctx, writeKind, opts, true)
}

// TryLock takes the write hold if it can at once, else returns
// ErrNotObtained.
func (rw *RWMutex) TryLock(ctx context.Context, opts ...Option) (*Lock, error) {
	return rw.acquire(ctx, writeKind, opts, false)
}

func (rw *RWMutex) acquire(ctx context.Context, k *kind, opts []Option, wait bool) (*Lock, error) {
	if ctx == nil {
		return nil, ErrNilContext
	}
	if rw == nil {
		return nil, ErrNilClient
	}
	r, err := rw.c.request(k, rw.name, opts, wait)
	if err != nil {
		return nil, rw.c.refused(ctx, rw.name, err)
	}
	r.releaseArg = argFalse // no limit: readers are not counted against one
	return rw.c.acquire(ctx, r)
}

// Name returns the lock's name.
func (rw *RWMutex) Name() string {
	if rw == nil {
		return ""
	}
	return rw.name
}
