package distlock

import (
	"errors"
	"fmt"
)

// ErrNotObtained is returned when a lock could not be obtained: another owner
// holds it (TryLock), or the caller's context ended or the retry strategy gave
// up while waiting (Lock). In the waiting case the error also wraps the
// context's error, so errors.Is(err, context.DeadlineExceeded) holds too.
var ErrNotObtained = errors.New("distlock: lock not obtained")

// ErrNotHeld is returned by Release, Extend and TTL when the lock is no longer
// held by this Lock: it expired, was taken by another owner, was released, or
// the Lock is nil. Nothing in Redis is changed when it is returned.
var ErrNotHeld = errors.New("distlock: lock not held")

// ErrInvalidKey is returned for an empty or over-long lock key.
var ErrInvalidKey = errors.New("distlock: invalid key")

// ErrInvalidTTL is returned for a TTL that is not positive, below a millisecond
// or above MaxTTL.
var ErrInvalidTTL = errors.New("distlock: invalid ttl")

// ErrInvalidOption is returned for an option with a value out of range.
var ErrInvalidOption = errors.New("distlock: invalid option")

// ErrNilClient is returned by every method of a Client built on a nil Redis
// client.
var ErrNilClient = errors.New("distlock: nil redis client")

// ErrClosed is returned by the methods of a Client after Close.
var ErrClosed = errors.New("distlock: client closed")

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

// extendCause maps the extend script's "not held" replies to a loss reason.
func extendCause(reply int64) error {
	if reply < 0 {
		return ErrTaken
	}
	return ErrExpired
}
