package distlock

import (
	"context"
	"sync"
	"time"
)

func singleFence(l *Lock) string { return l.fenceS }

// renewQuorum extends a batch of quorum locks: one pipeline per node, all
// nodes at once, each bounded by the per-node timeout; a lock is renewed when
// a majority renewed it within its validity.
func (r *renewer) renewQuorum(batch []*Lock) []renewResult {
	c := r.client
	timeout := nodeTimeout(batch[0].lease())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	renewed := make([][]bool, len(c.nodes))
	notHeld := make([][]bool, len(c.nodes))
	var wg sync.WaitGroup
	for i, rdb := range c.nodes {
		renewed[i], notHeld[i] = make([]bool, len(batch)), make([]bool, len(batch))
		wg.Add(1)
		go func() {
			defer wg.Done()
			fence := func(l *Lock) string { return l.fences()[i] }
			cmds, _ := r.pipelineExtend(ctx, rdb, batch, fence)
			if needsScriptLoad(cmds) {
				_ = extendScript.Load(ctx, rdb).Err()
				cmds, _ = r.pipelineExtend(ctx, rdb, batch, fence)
			}
			for j, cmd := range cmds {
				if cmd == nil {
					notHeld[i][j] = true // never granted on this node
					continue
				}
				if v, err := cmd.Int64(); err == nil {
					renewed[i][j], notHeld[i][j] = v == 1, v != 1
				}
			}
		}()
	}
	wg.Wait() // bounded: every node's pipeline stops at ctx's deadline
	res := make([]renewResult, len(batch))
	for j, l := range batch {
		var ok, no int
		for i := range c.nodes {
			if renewed[i][j] {
				ok++
			}
			if notHeld[i][j] {
				no++
			}
		}
		reply, err := c.quorumOutcome(ok, no, start, l.lease())
		res[j] = renewResult{l: l, start: start, reply: reply, err: err}
	}
	return res
}
