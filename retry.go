package distlock

import (
	"math/rand/v2"
	"time"
)

// RetryStrategy decides how long Lock waits before its next attempt. It is
// stateless, so one value can serve many concurrent calls.
type RetryStrategy interface {
	// Backoff returns the wait after attempt n (n ≥ 1) failed, or a negative
	// duration to give up. Lock never waits past the holder's remaining lease.
	Backoff(n int) time.Duration
}

// RetryFunc adapts a function to RetryStrategy.
type RetryFunc func(n int) time.Duration

// Backoff calls f(n).
func (f RetryFunc) Backoff(n int) time.Duration { return f(n) }

var defaultRetry = Jitter(ExponentialBackoff(time.Millisecond, 100*time.Millisecond))

// NoRetry gives up after the first attempt.
func NoRetry() RetryStrategy {
	return RetryFunc(func(int) time.Duration { return -1 })
}

// ConstantBackoff waits d between attempts.
func ConstantBackoff(d time.Duration) RetryStrategy {
	return RetryFunc(func(int) time.Duration { return d })
}

// ExponentialBackoff waits min, 2·min, 4·min, … up to max.
func ExponentialBackoff(min, max time.Duration) RetryStrategy {
	return RetryFunc(func(n int) time.Duration {
		d := min
		for i := 1; i < n && d < max; i++ {
			d *= 2
		}
		return clamp(d, min, max)
	})
}

// Jitter waits a uniformly random duration in [d/2, d] where d is what s
// says, so that waiters that failed together do not retry together.
func Jitter(s RetryStrategy) RetryStrategy {
	return RetryFunc(func(n int) time.Duration {
		d := s.Backoff(n)
		if d <= 1 {
			return d
		}
		return d/2 + rand.N(d/2+1)
	})
}

// LimitRetry gives up after max attempts in all.
func LimitRetry(s RetryStrategy, max int) RetryStrategy {
	return RetryFunc(func(n int) time.Duration {
		if n >= max {
			return -1
		}
		return s.Backoff(n)
	})
}

func clamp(d, lo, hi time.Duration) time.Duration {
	return min(max(d, lo), hi)
}
