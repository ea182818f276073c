package distlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated is returned when fewer replicas than WithReplicaAck asks
// for acknowledged a lock's write in time. An acquire that gets it has been
// undone; a held lock whose renewal gets it is lost (Lost fires, the cause
// matches both ErrLost and ErrNotReplicated).
var ErrNotReplicated = errors.New("distlock: too few replicas acknowledged")

var notReplicatedCause = fmt.Errorf("%w: %w", ErrLost, ErrNotReplicated)

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
// (standalone or Sentinel failover); on a Cluster client locking returns
// ErrInvalidOption.
func WithReplicaAck(replicas int, timeout time.Duration) ClientOption {
	return func(c *Client) { c.ack = replicaAck{replicas: replicas, timeout: timeout} }
}

func (a replicaAck) validate(rdb redis.UniversalClient) error {
	if a.replicas == 0 {
		return nil
	}
	if a.replicas < 0 || a.timeout < time.Millisecond {
		return fmt.Errorf("%w: WithReplicaAck needs replicas ≥ 1 and a timeout ≥ 1ms", ErrInvalidOption)
	}
	if _, ok := rdb.(*redis.ClusterClient); ok {
		return fmt.Errorf("%w: WithReplicaAck needs a standalone or Sentinel client, not a Cluster client", ErrInvalidOption)
	}
	return nil
}

// runAcked runs script and, when acknowledgement is on, a WAIT after it in
// one pipeline on one connection; acked reports whether enough replicas
// acknowledged.
func (a replicaAck) runAcked(ctx context.Context, rdb redis.UniversalClient, s *redis.Script, keys []string, args ...any) (res *redis.Cmd, acked bool) {
	if a.replicas == 0 {
		return s.Run(ctx, rdb, keys, args...), true
	}
	res, wait := a.pipeline(ctx, rdb, func(p redis.Pipeliner) *redis.Cmd { return s.EvalSha(ctx, p, keys, args...) })
	if isNoScript(res.Err()) {
		res, wait = a.pipeline(ctx, rdb, func(p redis.Pipeliner) *redis.Cmd { return s.Eval(ctx, p, keys, args...) })
	}
	return res, wait.Err() == nil && wait.Val() >= int64(a.replicas)
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
