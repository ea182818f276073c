package distlock

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxIdleChannels bounds how many channels stay subscribed without local
// waiters. Keeping a hot key's channel subscribed between waits saves a
// SUBSCRIBE round trip per wait, and lets a Lock call line up in the same
// call that asks for the lock.
const maxIdleChannels = 256

// notifier is the one pub/sub subscription per Client (one per master on a
// Cluster, one per node for a quorum) through which waiters learn of
// handoffs and releases. Waiters in a Redis line listen on their Client's
// own channel for the lock, where handoffs to them are published; quorum
// waiters listen on the lock's shared channel and form a local line, so
// that only its head asks the nodes.
type notifier struct {
	c    *Client
	subs []*subscriber // one per node (a Cluster is one node here)

	mu    sync.Mutex
	chans map[string]*channelState
	idle  int
	// waited counts the channels in chans that are not kept: none, and
	// a Lock call need not look for a live one (call.start).
	waited atomic.Int32
	// held holds the Locks that calls of this Client took after lining up,
	// by token: a grant notice to one while it holds is late, of a grant
	// before it, and must not be taken for a grant to a waiter that is gone
	// (which would be freed). Ended Locks are swept out when the map has
	// doubled since the last sweep.
	held      map[string]*Lock
	heldSweep int
	ctx       context.Context
	stop      context.CancelFunc
	wg        sync.WaitGroup
}

type channelState struct {
	local  []*waiter          // quorum waiters of this process, head first
	queued map[string]*waiter // waiters in a Redis line, by token
	live   bool               // the subscription is confirmed
	since  time.Time          // when the channel last became idle
	ps     *redis.PubSub      // the subscription that confirmed it
	// lock names the lock whose handoffs come on the channel, to pass on
	// a grant whose waiter is gone (token unset)
	lock hold
	kept bool // subscribed for as long as the notifier lives (see keep)
}

func (s *channelState) empty() bool { return len(s.local) == 0 && len(s.queued) == 0 }

// waiter is one waiting Lock call.
type waiter struct {
	channel string
	token   string        // "" for a quorum waiter in the local line
	wake    chan struct{} // a release, the subscription became live, or a reconnect
	grant   chan handoff  // a handoff to this waiter
}

// handoff is a grant that a release made to a waiter.
type handoff struct {
	fence int64
	link  string // the releaser's Observer.Link
}

func newNotifier(c *Client, rdbs []redis.UniversalClient) *notifier {
	ctx, stop := context.WithCancel(context.Background())
	n := &notifier{c: c, chans: map[string]*channelState{}, held: map[string]*Lock{}, ctx: ctx, stop: stop}
	for _, rdb := range rdbs {
		n.subs = append(n.subs, newSubscriber(n, rdb))
	}
	return n
}

// existingNotifier returns the notifier if one was started.
func (c *Client) existingNotifier() *notifier {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.notifier
}

// join adds a waiter in a Redis line, listening on channel for handoffs to
// h's token, and subscribes to channel on first use.
func (n *notifier) join(channel string, h hold) *waiter {
	w := newWaiter(channel, h.token)
	n.mu.Lock()
	s := n.stateLocked(channel)
	s.queued[h.token], s.lock = w, h
	n.mu.Unlock()
	return w
}

// joinLive is join if channel is subscribed and confirmed, else nil.
func (n *notifier) joinLive(channel string, h hold) *waiter {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.chans[channel]
	if s == nil || !s.live {
		return nil
	}
	w := newWaiter(channel, h.token)
	if s.empty() {
		n.idle--
	}
	s.queued[h.token], s.lock = w, h
	return w
}

// joinLocal adds a waiter at the end of this process's line for channel.
func (n *notifier) joinLocal(channel string) *waiter {
	w := newWaiter(channel, "")
	n.mu.Lock()
	s := n.stateLocked(channel)
	s.local = append(s.local, w)
	n.mu.Unlock()
	return w
}

func newWaiter(channel, token string) *waiter {
	return &waiter{channel: channel, token: token, wake: make(chan struct{}, 1), grant: make(chan handoff, 1)}
}

// stateLocked returns channel's state, subscribing on first use.
func (n *notifier) stateLocked(channel string) *channelState {
	s := n.chans[channel]
	switch {
	case s == nil:
		s = &channelState{queued: map[string]*waiter{}}
		n.chans[channel] = s
		n.waited.Add(1)
		for _, sub := range n.subs {
			sub.request(channel, true)
		}
	case s.empty():
		n.idle--
	}
	return s
}

// keep subscribes channel, which has no waiters, for as long as the
// notifier lives, on every node that is not a Cluster (see
// Client.watchRestarts).
func (n *notifier) keep(channel string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.chans[channel] != nil {
		return
	}
	n.chans[channel] = &channelState{queued: map[string]*waiter{}, kept: true}
	for _, sub := range n.subs {
		if sub.cluster == nil {
			sub.request(channel, true)
		}
	}
}

// isLive reports whether w's channel is confirmed subscribed.
func (n *notifier) isLive(w *waiter) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.chans[w.channel]
	return s != nil && s.live
}

// leave removes w. A local head that leaves without the lock passes its
// turn to the next waiter.
func (n *notifier) leave(w *waiter) { n.leaveLine(w, false) }

func (n *notifier) leaveLine(w *waiter, acquired bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.chans[w.channel]
	if s == nil {
		return
	}
	if w.token != "" {
		if s.queued[w.token] == w {
			delete(s.queued, w.token)
		}
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

// waitingLocally reports whether this process has waiters in the local line
// for channel; a new Lock call then queues behind them instead of barging.
func (n *notifier) waitingLocally(channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.chans[channel]
	return s != nil && len(s.local) > 0
}

// holding records l, which its call took after lining up, so that a late
// notice of a handoff to it is not taken for a grant to a waiter that is
// gone. It runs before the call leaves the line, so that no notice falls
// between the two.
func (n *notifier) holding(l *Lock) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.held) >= n.heldSweep {
		for token, h := range n.held {
			if !h.isHeld() {
				delete(n.held, token)
			}
		}
		n.heldSweep = max(2*len(n.held), 64)
	}
	n.held[l.token] = l
}

// deliver handles a message on channel: "g <fence> <token> [<link>]" hands
// the lock to that waiter (or, if it is gone without the lock, passes the
// lock on); "p" is a
// script making sure that someone hears this Client (clear_gone in
// lua/lib.lua) and asks nothing; anything else says the lock is free and
// wakes the head of the local line and the waiters in line.
func (n *notifier) deliver(channel, payload string) {
	if payload == "p" {
		return // waking waiters would have them ask again, and ping again
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.chans[channel]
	rest, isGrant := strings.CutPrefix(payload, "g ")
	if !isGrant {
		if s != nil {
			s.wakeAll()
		}
		return
	}
	f, rest, _ := strings.Cut(rest, " ")
	token, link, _ := strings.Cut(rest, " ")
	fence, err := strconv.ParseInt(f, 10, 64)
	if err != nil || token == "" {
		return
	}
	if s != nil {
		if w := s.queued[token]; w != nil {
			select {
			case w.grant <- handoff{fence, link}:
			default:
			}
			return
		}
	}
	if l := n.held[token]; l != nil {
		if l.isHeld() {
			return // late: a grant to this token that ended before l
		}
		delete(n.held, token)
	}
	if s != nil && s.lock.kind != nil {
		h := s.lock
		h.token = token
		n.c.b.passOn(h)
	}
}

func (s *channelState) wakeAll() {
	if len(s.local) > 0 {
		signal(s.local[0].wake)
	}
	for _, w := range s.queued {
		signal(w.wake)
	}
}

// confirmed marks channel subscribed on ps and wakes its waiters: a release
// may have happened before the subscription was live.
func (n *notifier) confirmed(channel string, ps *redis.PubSub) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s := n.chans[channel]; s != nil {
		s.live, s.ps = true, ps
		s.wakeAll()
	}
}

// wanted reports whether channel is one the notifier keeps subscribed.
func (n *notifier) wanted(channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.chans[channel] != nil
}

// unsubscribed handles the end of channel's subscription on ps. One that
// this notifier did not ask for (a Cluster slot moved) is made again if the
// channel still has waiters, who are woken to ask Redis: a release may have
// happened in between. It reports whether to subscribe again.
func (n *notifier) unsubscribed(channel string, ps *redis.PubSub) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.chans[channel]
	if s == nil || s.ps != ps {
		return false
	}
	s.live = false
	s.wakeAll()
	return true
}

// disconnected wakes every waiter after ps lost its connection (go-redis
// reconnects and resubscribes on the next Receive) and marks its channels
// unconfirmed until then.
func (n *notifier) disconnected(ps *redis.PubSub) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range n.chans {
		if s.ps == ps {
			s.live = false
		}
		s.wakeAll()
	}
}

// channels lists the channels the notifier keeps subscribed.
func (n *notifier) channels() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]string, 0, len(n.chans))
	for ch := range n.chans {
		out = append(out, ch)
	}
	return out
}

// rehome is told by a waiter on channel that a handoff passed it over:
// asking again, it found itself gone from the line (or the line gone),
// so that a release found nobody listening on its channel. After a
// failover that did not kill the old master, the subscription can be left
// there, listening to a replica: it is moved to the master (remake;
// applySharded on a Cluster). Only a single-deployment Client has Redis
// lines; a quorum's waiters wait in a local one.
func (n *notifier) rehome(channel string) {
	if len(n.subs) == 1 {
		n.subs[0].enqueue(subOp{channel: channel, on: true, rehome: true, passedOver: true})
	}
}

// pruneLocked unsubscribes the longest-idle channels beyond maxIdleChannels.
func (n *notifier) pruneLocked() {
	for n.idle > maxIdleChannels {
		var oldest string
		for ch, s := range n.chans {
			if s.empty() && !s.kept && (oldest == "" || s.since.Before(n.chans[oldest].since)) {
				oldest = ch
			}
		}
		delete(n.chans, oldest)
		n.waited.Add(-1)
		n.idle--
		for _, sub := range n.subs {
			sub.request(oldest, false)
		}
	}
}

// listenersGrace bounds how long Client.Close waits for the notifier's
// goroutines once its background work is done. They end as soon as their
// connections close, unless one is stuck in go-redis' dial or handshake
// with a server that does not answer (frozen, or a network that drops
// everything), holding the PubSub's lock, until its DialTimeout or
// ReadTimeout: Close must not wait that long, nor past the bound it gives
// the background work. A goroutine left then ends when go-redis gives up
// or the network answers (it sees n.ctx cancelled).
const listenersGrace = 100 * time.Millisecond

// wait waits, at most limit, for the goroutines of a stopped notifier.
func (n *notifier) wait(limit time.Duration) {
	done := make(chan struct{})
	go func() {
		n.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
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

// park blocks until w is woken, wait passes (negative: no timer), ctx ends
// or the Client closes. It returns the handoff when the lock was handed to
// w (fence 0 otherwise).
func (c *Client) park(ctx context.Context, w *waiter, wait time.Duration) (handoff, error) {
	select {
	case h := <-w.grant:
		return h, nil
	default:
	}
	var timeout <-chan time.Time
	if wait >= 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case h := <-w.grant:
		return h, nil
	case <-w.wake:
	case <-timeout:
	case <-c.closedCtx.Done():
		return handoff{}, ErrClosed
	case <-ctx.Done():
		return handoff{}, ctx.Err()
	}
	return handoff{}, nil
}
