package distlock

import (
	"context"
	"time"
)

func singleFence(l *Lock) string { return l.fenceS }

// renewQuorum extends a batch of quorum locks: one pipeline per node, all
// nodes at once. It waits for the nodes only up to the per-node timeout (a
// client that ignores context deadlines must not hold renewal up); a lock is
// renewed when a majority renewed it within its validity.
func (r *renewer) renewQuorum(batch []*Lock) []renewResult {
	c := r.client
	timeout := nodeTimeout(batch[0].lease())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	type nodeReplies struct {
		renewed, notHeld []bool
	}
	answers := make(chan nodeReplies, len(c.nodes))
	for i, rdb := range c.nodes {
		go func() {
			fence := func(l *Lock) string { return l.fences()[i] }
			cmds, _ := r.pipelineExtend(ctx, rdb, batch, fence)
			if needsScriptLoad(cmds) {
				_ = extendScript.Load(ctx, rdb).Err()
				cmds, _ = r.pipelineExtend(ctx, rdb, batch, fence)
			}
			a := nodeReplies{make([]bool, len(batch)), make([]bool, len(batch))}
			for j, cmd := range cmds {
				if cmd == nil {
					a.notHeld[j] = true // never granted on this node
					continue
				}
				if v, err := cmd.Int64(); err == nil {
					a.renewed[j], a.notHeld[j] = v == 1, v != 1
				}
			}
			answers <- a
		}()
	}
	ok, no := make([]int, len(batch)), make([]int, len(batch))
collect:
	for range c.nodes {
		select {
		case a := <-answers:
			for j := range batch {
				if a.renewed[j] {
					ok[j]++
				}
				if a.notHeld[j] {
					no[j]++
				}
			}
		case <-ctx.Done():
			break collect
		}
	}
	res := make([]renewResult, len(batch))
	for j, l := range batch {
		reply, err := c.quorumOutcome(ok[j], no[j], start, l.lease())
		res[j] = renewResult{l: l, start: start, reply: reply, err: err}
	}
	return res
}
