package distlock

import (
	"errors"
	"fmt"
)

// ErrNotObtained is returned when a lock could not be obtained: another owner
// holds it (TryLock), or the caller's context ended while waiting for a lock
// that Redis said was held (Lock), or had ended before the call. In the last
// two cases the error also wraps the context's error, so
// errors.Is(err, context.DeadlineExceeded) holds too. A context that ends
// before Redis answered the call's first request gives ErrNoAnswer instead.
// A *QuorumError matches it as well.
var ErrNotObtained = errors.New("distlock: lock not obtained")

// ErrNoAnswer is returned, wrapping the context's error, when the caller's
// context ended before Redis answered an acquire's first request: Redis is
// frozen, partitioned or overloaded (or the Client had so many acquires
// waiting for answers that the request was never sent), and whether the
// lock is free is unknown. It does not match ErrNotObtained, which says that Redis answered
// and the lock was held. A grant that Redis makes after the caller gave up
// is released in the background. (A quorum Client reports a missed majority
// as a *QuorumError, whose node errors say which nodes did not answer.)
var ErrNoAnswer = errors.New("distlock: no answer from Redis")

// ErrNotHeld is returned by Release, Extend and TTL when the lock is no longer
// held by this Lock: it expired, was taken by another owner, was released, or
// the Lock is nil. Nothing in Redis is changed when it is returned.
var ErrNotHeld = errors.New("distlock: lock not held")

// ErrInvalidKey is returned for an empty or over-long lock key, and on a
// Cluster for a name whose Redis keys would have no hash tag (one that
// begins with '}'), since they could not share a slot.
var ErrInvalidKey = errors.New("distlock: invalid key")

// ErrInvalidTTL is returned for a TTL below MinTTL (MinRenewedTTL for a
// lock that is renewed) or above MaxTTL.
var ErrInvalidTTL = errors.New("distlock: invalid ttl")

// ErrInvalidOption is returned for an option with a value out of range, or
// one the Client cannot honour (WithFair on a quorum Client, WithReplicaAck
// on a Cluster or quorum Client).
var ErrInvalidOption = errors.New("distlock: invalid option")

// ErrLimitMismatch is returned by a Semaphore's Acquire and TryAcquire
// when the semaphore is in use with another limit: every holder and waiter
// of a name must give the same n while any holds a permit. It matches
// ErrInvalidOption too.
var ErrLimitMismatch = fmt.Errorf("%w: semaphore in use with another limit", ErrInvalidOption)

// ErrNilContext is returned by every method that takes a context when it is
// given a nil one, before anything else is done: a nil context is a bug in
// the caller, and a panic is no way to report it (Observe's would come from
// its own goroutine, out of any recover's reach). Some methods cannot just
// refuse: Release, Resign and MultiLock.Release still release, as with
// context.Background() (a hold must not outlive the bug), and return it as
// well; Lock.Context and MultiLock.Context return a context already
// cancelled with it as the cause; Observe returns a channel closed at once.
var ErrNilContext = errors.New("distlock: nil context")

// ErrNilClient is returned by every method of a Client built on a nil Redis
// client, and by those of a nil or zero RWMutex, Semaphore or Election (one
// not made by its Client's New function).
var ErrNilClient = errors.New("distlock: nil redis client")

// ErrClosed is returned by the methods of a Client after Close, and by Lock
// calls still waiting when it closes (with ErrNotObtained).
var ErrClosed = errors.New("distlock: client closed")

// ErrNotReplicated is returned when fewer replicas than WithReplicaAck asks
// for acknowledged a lock's write in time. An acquire that gets it has been
// undone; a held lock whose renewal gets it is lost (Lost fires, the cause
// matches both ErrLost and ErrNotReplicated).
var ErrNotReplicated = errors.New("distlock: too few replicas acknowledged")

// ErrNoLeader is returned by Election.Leader when nobody leads.
var ErrNoLeader = errors.New("distlock: no leader")

// ErrLost is matched by every reason a held lock can be lost.
var ErrLost = errors.New("distlock: lock lost")

// ErrExpired: the lease ran out on the server (or the lock was force-released)
// before it was renewed.
var ErrExpired = fmt.Errorf("%w: lease expired", ErrLost)

// ErrTaken: the lock expired and another owner now holds it.
var ErrTaken = fmt.Errorf("%w: held by another owner", ErrLost)

// ErrUnreachable: no renewal was confirmed before the local validity deadline,
// so the lease may have run out on the server. The wrapped error says why.
var ErrUnreachable = fmt.Errorf("%w: no renewal confirmed before the lease ran out", ErrLost)

// ErrReleased is the context cause after Release.
var ErrReleased = errors.New("distlock: lock released")

var (
	// closedCause is why locks end when their Client closes.
	closedCause = fmt.Errorf("%w: %w", ErrLost, ErrClosed)
	// notReplicatedCause ends a lock whose renewal was not replicated.
	notReplicatedCause = fmt.Errorf("%w: %w", ErrLost, ErrNotReplicated)
)
