package distlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// replicaAck is the WithReplicaAck setting; replicas == 0 means off.
type replicaAck struct {
	replicas int
	timeout  time.Duration
}

// WithReplicaAck makes every acquire and renewal wait until at least replicas
// replicas acknowledged it (Redis WAIT), for at most timeout. It closes the
// window in which a master fails over to a replica that never saw the lock.
// The WAIT rides in the same pipeline as the script, so it costs no extra
// round trip, only the replication delay. It needs a single-master client
// (standalone or Sentinel failover): on a Cluster or quorum Client every
// method returns ErrInvalidOption, as it does when timeout does not end at
// least 200 ms before the Redis client's ReadTimeout, which would cut WAIT
// off.
func WithReplicaAck(replicas int, timeout time.Duration) ClientOption {
	return func(c *clientConfig) { c.ack = replicaAck{replicas: replicas, timeout: timeout} }
}

func (a replicaAck) validate() error {
	if a != (replicaAck{}) && (a.replicas < 1 || a.timeout < time.Millisecond) {
		return fmt.Errorf("%w: WithReplicaAck needs replicas ≥ 1 and a timeout ≥ 1ms", ErrInvalidOption)
	}
	return nil
}

// waitLate is how much later than its timeout Redis may answer a WAIT
// (it times blocked clients out on its cron, every 100 ms by default) plus
// a round trip.
const waitLate = 200 * time.Millisecond

// fits reports ErrInvalidOption when rdb would cut a WAIT off before its
// timeout: go-redis reads a pipeline's replies under the client's
// ReadTimeout, then retries the pipeline, running the script again, and
// the call fails with a timeout, not ErrNotReplicated, after MaxRetries+1
// ReadTimeouts.
func (a replicaAck) fits(rdb redis.UniversalClient) error {
	r, ok := rdb.(*redis.Client)
	if a.replicas == 0 || !ok || r == nil {
		return nil
	}
	if rt := r.Options().ReadTimeout; rt > 0 && a.timeout+waitLate > rt {
		return fmt.Errorf("%w: WithReplicaAck's timeout %v must be at least %v below the Redis client's ReadTimeout %v",
			ErrInvalidOption, a.timeout, waitLate, rt)
	}
	return nil
}

// run runs cmd, a call of s (see script.command), and, when
// acknowledgement is on, a WAIT after it in one pipeline on one
// connection; acked reports whether enough replicas acknowledged.
func (a replicaAck) run(ctx context.Context, rdb redis.UniversalClient, s *script, cmd []any) (res *redis.Cmd, acked bool) {
	if a.replicas == 0 {
		return s.call(ctx, rdb, cmd), true
	}
	res, wait := a.pipeline(ctx, rdb, func(p redis.Pipeliner) *redis.Cmd { return p.Do(ctx, cmd...) })
	if isNoScript(res.Err()) {
		if err := s.reload(ctx, rdb, cmd); err != nil {
			res.SetErr(err)
			return res, false
		}
		// A new variable: reassigning cmd, which the closures capture, would
		// move it to the heap on every call.
		eval := s.asEval(cmd)
		res, wait = a.pipeline(ctx, rdb, func(p redis.Pipeliner) *redis.Cmd { return p.Do(ctx, eval...) })
	}
	return res, a.enough(wait)
}

func (a replicaAck) pipeline(ctx context.Context, rdb redis.UniversalClient, script func(redis.Pipeliner) *redis.Cmd) (*redis.Cmd, *redis.IntCmd) {
	var res *redis.Cmd
	var wait *redis.IntCmd
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		res = script(p)
		wait = a.queueWait(ctx, p)
		return nil
	})
	return res, wait
}

// queueWait adds WAIT to a pipeline (Pipeliner has no Wait method).
func (a replicaAck) queueWait(ctx context.Context, p redis.Pipeliner) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx, "wait", a.replicas, a.timeout.Milliseconds())
	_ = p.Process(ctx, cmd)
	return cmd
}

func (a replicaAck) enough(wait *redis.IntCmd) bool {
	return wait == nil || (wait.Err() == nil && wait.Val() >= int64(a.replicas))
}
