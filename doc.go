// Package distlock provides distributed locks on Redis for Go services that
// run as many processes on many machines.
//
// A lock is a lease: TryLock and Lock take it with one atomic script call,
// recording a random 128-bit token (who holds it), a hold count (reentrancy)
// and a fencing token, and give it a TTL so that a crashed holder cannot
// block others forever. Release and Extend check the grant, so a holder whose
// lease ran out can never release or extend the next holder's lock.
//
// # Leases, renewal and the loss signal
//
// By default a Client renews the leases of the locks it holds at about a
// third of their TTL, in pipelined batches from one scheduler per Client.
// Each lock keeps a local validity deadline: the moment its last confirmed
// grant or renewal was sent, plus the TTL, minus a drift margin (1% of the
// TTL + 2ms). The server's expiry cannot come before it, since the server
// received the command after it was sent. When that deadline passes without a
// confirmed renewal (Redis unreachable, or slow), or when a renewal finds the
// lock gone or taken, Lock.Lost is closed and the contexts from Lock.Context
// are cancelled with the reason as their cause (ErrExpired, ErrTaken,
// ErrUnreachable, ErrClosed; ErrReleased after Release).
//
// What the signal cannot do: it runs in the holder's process, so a process
// that is paused (GC pause, VM stall, SIGSTOP) or whose clock jumps can go on
// acting after its lease ended and before it looks at the signal. No lease
// based lock can prevent that. Fencing tokens can: Lock.Fence is strictly
// increasing across all grants of a key, so a resource that remembers the
// highest fence it accepted can refuse a write carrying a smaller one.
// FenceGuard does that for data kept in Redis: its Set, HSet and Run write
// only if the fence is at least the highest one the key has seen, in the
// same script, and return ErrStaleFence otherwise. For a SQL row, keep the
// fence in a column and write with
// "UPDATE ... SET ..., fence = $1 WHERE id = $2 AND fence <= $1"
// (0 rows affected: stale; see examples/sqlfence).
//
// # Waiting
//
// A Lock call that finds the lock held joins a line kept in Redis under the
// lock's hash tag; the release script hands the lock to the first waiter
// still in line and publishes the grant on that waiter's Client's own
// channel, which the Client hears over its one pub/sub subscription (one per
// master on a Cluster, with sharded pub/sub). Waiters also re-ask at the holder's expiry and to keep their place,
// so a lost message never hangs them. WithFair makes the order strict. A
// quorum Client (NewQuorum) waits in a per-process line instead.
//
// # Deployments
//
// New takes a standalone, Sentinel (with WithReplicaAck to close the
// failover window) or Cluster client; NewQuorum takes several independent
// nodes and grants by majority (Redlock), with fences that still increase.
//
// # Keys in Redis
//
// A lock named "job" is the hash "distlock:{job}" (owner, count, fence,
// metadata, since) plus the counter "distlock:{job}:fence", which never
// expires so that fences never repeat. The hash tag keeps every key of a lock
// in one Redis Cluster slot. WithKeyPrefix changes "distlock:".
package distlock
