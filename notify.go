package distlock

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxIdleChannels bounds how many release channels stay subscribed without
// local waiters. Keeping a hot key's channel subscribed between waits saves a
// SUBSCRIBE round trip per wait.
const maxIdleChannels = 256

// notifier is the one pub/sub subscription per Client (one per master on a
// Cluster, one per node for a quorum) through which waiters learn of
// handoffs and releases. Waiters in the Redis line listen on the Client's own
// channel for the lock, where handoffs to them are published. Quorum waiters
// listen on the lock's shared channel and form a local line, so that only
// its head asks the nodes (no herd). Releases made by this process are
// delivered directly, before Redis' message arrives.
type notifier struct {
	rdbs    []redis.UniversalClient // one subscription on each (quorum: every node)
	cluster *redis.ClusterClient    // set: sharded subscriptions, see notify_shard.go

	mu     sync.Mutex
	ps     []*redis.PubSub          // every subscription, for close
	shards map[string]*redis.PubSub // Cluster: master address -> its subscription
	chans  map[string]*channelState
	idle   int
	ctx    context.Context
	stop   context.CancelFunc
	done   []chan struct{}
}

type channelState struct {
	local  []*waiter          // quorum waiters in this process's line, head first
	queued map[string]*waiter // waiters in the Redis line, by token
	since  time.Time          // when the channel last became idle
	shard  *redis.PubSub      // Cluster: the subscription that carries it
}

func (s *channelState) empty() bool { return len(s.local) == 0 && len(s.queued) == 0 }

// waiter is one waiting Lock call.
type waiter struct {
	channel string
	token   string
	queued  bool          // in the Redis line (else in the local line)
	wake    chan struct{} // a release, or the subscription became live
	grant   chan int64    // in the Redis line: the lock was handed to this waiter
}

func newNotifier(rdbs []redis.UniversalClient) *notifier {
	ctx, stop := context.WithCancel(context.Background())
	n := &notifier{rdbs: rdbs, chans: map[string]*channelState{}, shards: map[string]*redis.PubSub{}, ctx: ctx, stop: stop}
	if len(rdbs) == 1 {
		n.cluster, _ = rdbs[0].(*redis.ClusterClient)
	}
	return n
}

// join adds a waiter for channel, subscribing on first use.
func (n *notifier) join(channel, token string, queued bool) *waiter {
	w := &waiter{channel: channel, token: token, queued: queued,
		wake: make(chan struct{}, 1), grant: make(chan int64, 1)}
	n.mu.Lock()
	s := n.chans[channel]
	var subscribe []*redis.PubSub
	isNew := s == nil
	if s == nil {
		s = &channelState{queued: map[string]*waiter{}}
		n.chans[channel] = s
		subscribe = n.connectLocked()
	} else if s.empty() {
		n.idle--
	}
	if queued {
		s.queued[token] = w
	} else {
		s.local = append(s.local, w)
	}
	n.mu.Unlock()
	if n.cluster != nil && subscribe == nil && isNew {
		n.subscribeShard(channel)
	}
	n.subscribe(subscribe, channel)
	return w
}

// leave removes w. A local head that leaves without the lock passes its
// turn to the next waiter.
func (n *notifier) leave(w *waiter, acquired bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.chans[w.channel]
	if s == nil {
		return
	}
	if w.queued {
		delete(s.queued, w.token)
	} else if i := indexOf(s.local, w); i >= 0 {
		s.local = append(s.local[:i], s.local[i+1:]...)
		if i == 0 && !acquired && len(s.local) > 0 {
			signal(s.local[0].wake)
		}
	}
	if s.empty() {
		s.since = time.Now()
		n.idle++
		n.pruneLocked()
	}
}

// isHead reports whether w is first in its local line.
func (n *notifier) isHead(w *waiter) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.chans[w.channel]
	return s != nil && len(s.local) > 0 && s.local[0] == w
}

// waiting reports whether this process has waiters in the local line for
// channel; a new Lock call then queues behind them instead of barging.
func (n *notifier) waiting(channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.chans[channel]
	return s != nil && len(s.local) > 0
}

// released delivers a release or handoff: payload "r" (or anything else not
// starting with "g ") wakes the head of the local line and the queued
// waiters; "g <fence> <token>" hands the lock to that queued waiter.
func (n *notifier) released(channel, payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.chans[channel]
	if s == nil {
		return
	}
	if rest, ok := strings.CutPrefix(payload, "g "); ok {
		fence, token, _ := strings.Cut(rest, " ")
		if w := s.queued[token]; w != nil {
			if f, err := strconv.ParseInt(fence, 10, 64); err == nil {
				select {
				case w.grant <- f:
				default:
				}
			}
		}
		return
	}
	s.wakeAll()
}

func (s *channelState) wakeAll() {
	if len(s.local) > 0 {
		signal(s.local[0].wake)
	}
	for _, w := range s.queued {
		signal(w.wake)
	}
}

func (n *notifier) wakeEveryone() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range n.chans {
		s.wakeAll()
	}
}

// connectLocked starts the subscriptions on first use and returns them.
func (n *notifier) connectLocked() []*redis.PubSub {
	if n.ctx.Err() != nil || n.cluster != nil {
		return nil // closed: waiters fall back to their timers and see ErrClosed
	}
	if n.ps == nil {
		for _, rdb := range n.rdbs {
			ps, done := rdb.Subscribe(n.ctx), make(chan struct{})
			n.ps, n.done = append(n.ps, ps), append(n.done, done)
			go n.receive(ps, done)
		}
	}
	return n.ps
}

// subscribe adds channel to the subscriptions, outside the notifier's lock:
// on a node that is down it would block until the dial fails. Errors surface
// in receive, which reconnects and resubscribes. With several nodes (quorum)
// each gets its own goroutine, so that a dead node does not hold up the rest.
func (n *notifier) subscribe(pss []*redis.PubSub, channel string) {
	if len(pss) == 0 {
		return
	}
	if len(pss) == 1 {
		_ = pss[0].Subscribe(n.ctx, channel)
		return
	}
	for _, ps := range pss {
		go func() { _ = ps.Subscribe(n.ctx, channel) }()
	}
}

// pruneLocked unsubscribes the longest-idle channels beyond maxIdleChannels.
func (n *notifier) pruneLocked() {
	for n.idle > maxIdleChannels {
		var oldest string
		for ch, s := range n.chans {
			if s.empty() && (oldest == "" || s.since.Before(n.chans[oldest].since)) {
				oldest = ch
			}
		}
		shard := n.chans[oldest].shard
		delete(n.chans, oldest)
		n.idle--
		if shard != nil {
			go func() { _ = shard.SUnsubscribe(n.ctx, oldest) }()
			continue
		}
		for _, ps := range n.ps {
			go func() { _ = ps.Unsubscribe(n.ctx, oldest) }()
		}
	}
}

// receive reads the subscription until the notifier closes. A confirmation
// of a (re)subscription wakes that channel's waiters: a release may have
// happened before the subscription was live. A broken connection wakes all
// waiters, then go-redis reconnects and resubscribes on the next Receive.
func (n *notifier) receive(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	backoff := time.Millisecond
	for {
		msg, err := ps.Receive(n.ctx)
		if err != nil {
			if n.ctx.Err() != nil {
				return
			}
			n.wakeEveryone()
			if sleepCtx(n.ctx, backoff) != nil {
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = time.Millisecond
		switch m := msg.(type) {
		case *redis.Message:
			n.released(m.Channel, m.Payload)
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				n.released(m.Channel, "r")
			case "sunsubscribe":
				n.resubscribe(m.Channel)
			}
		}
	}
}

func (n *notifier) close() {
	n.stop()
	n.mu.Lock()
	pss, done := n.ps, n.done
	n.ps = nil
	n.mu.Unlock()
	for i, ps := range pss {
		_ = ps.Close()
		<-done[i]
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func indexOf(line []*waiter, w *waiter) int {
	for i, x := range line {
		if x == w {
			return i
		}
	}
	return -1
}

// tellWaiters passes the outcome of a release made by this process to its
// own waiters at once: res is the release script's reply, {0} for a freed
// lock or {0, fence, token} for a handoff (to a waiter of this Client if the
// token is one of its own).
func (c *Client) tellWaiters(names keyNames, res []any) {
	c.mu.Lock()
	n := c.notifier
	c.mu.Unlock()
	if n == nil {
		return
	}
	if len(res) == 3 {
		fence, _ := res[1].(int64)
		token, _ := res[2].(string)
		n.released(names.inbox, "g "+strconv.FormatInt(fence, 10)+" "+token)
		return
	}
	n.released(names.channel, "r")
}
