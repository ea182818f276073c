package distlock

// On a Cluster, releases are announced with SPUBLISH on the lock's shard
// channel, which carries the lock's hash tag: the message stays on the
// shard that owns the lock instead of being broadcast over the cluster bus
// to every node. A shard channel can only be subscribed to on the master of
// its slot, so the notifier keeps one subscription per master and puts each
// channel on the subscription of its slot's master.

// subscribeShard subscribes channel on its slot's master. On failure the
// waiters still re-ask Redis on their refresh timer.
func (n *notifier) subscribeShard(channel string) {
	node, err := n.cluster.MasterForKey(n.ctx, channel)
	if err != nil {
		return
	}
	addr := node.Options().Addr
	n.mu.Lock()
	s := n.chans[channel]
	if s == nil || n.ctx.Err() != nil {
		n.mu.Unlock()
		return
	}
	ps := n.shards[addr]
	if ps == nil {
		ps = node.SSubscribe(n.ctx)
		done := make(chan struct{})
		n.shards[addr] = ps
		n.ps, n.done = append(n.ps, ps), append(n.done, done)
		go n.receive(ps, done)
	}
	s.shard = ps
	n.mu.Unlock()
	_ = ps.SSubscribe(n.ctx, channel)
}

// resubscribe follows a shard channel whose slot moved (the old master ends
// the subscription with SUNSUBSCRIBE) if it still has waiters, and wakes them
// to re-ask Redis: a release may have happened in between.
func (n *notifier) resubscribe(channel string) {
	n.mu.Lock()
	s := n.chans[channel]
	n.mu.Unlock()
	if s == nil || n.cluster == nil {
		return // unsubscribed by prune
	}
	n.released(channel, "r")
	go n.subscribeShard(channel)
}
