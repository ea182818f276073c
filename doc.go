// Package distlock provides distributed locks on Redis for Go services that
// run as many processes on many machines: locks (Client.Lock, TryLock),
// read-write locks (NewRWMutex), semaphores (NewSemaphore), multi-key locks
// (LockAll) and leader election (NewElection).
//
// Every hold is a *Lock: a lease taken with one atomic script call, with a
// random token (who holds it: Release and Extend act only on this hold), a
// fencing token (Fence: greater than that of every earlier grant of the
// lock) and a TTL, so that a crashed holder blocks others for one lease at
// most. The Client renews the leases of live holders, and closes Lost and
// cancels the holds' contexts (Lock.Context) as soon as a hold is known
// lost, including when no renewal was confirmed before the lease could have
// run out in Redis. Waiters are not polling: they line up in Redis and a
// release hands the lock to the first of them, telling only that waiter's
// process.
//
// A lease cannot stop a holder that was paused (GC, VM stall) past its
// lease from acting when it resumes; pass Fence to the resource and let it
// refuse smaller fences (package fence does that for data in Redis).
//
// New takes a standalone, Sentinel or Cluster client; NewQuorum takes
// independent servers and grants by majority (Redlock). WithObserver and
// WithLogger report what the locks do; package distlock/otel implements
// Observer with OpenTelemetry.
//
// The repository's docs/ directory has the design, the safety model, the
// Redis layout and costs, and the choice of deployment.
package distlock
