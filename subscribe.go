package distlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscriber keeps a notifier's subscriptions on one node, changing them in
// the order they were asked for: an unsubscribe sent from one goroutine must
// never land after a later subscribe of the same channel, or a waiter would
// listen on nothing. One goroutine applies the changes, so a node that is
// down holds up only its own.
//
// On a Cluster, notices go over sharded pub/sub: the scripts SPUBLISH on
// channels carrying the lock's hash tag, so a message stays on the lock's
// shard instead of crossing the cluster bus to every node. A shard channel
// can only be subscribed to on its slot's master, so the subscriber keeps
// one subscription per master and puts each channel on its master's.
type subscriber struct {
	n       *notifier
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // set on a Cluster

	mu      sync.Mutex
	ops     []subOp
	kick    chan struct{}
	retired map[*redis.PubSub]bool // closed by run: their listeners end

	// owned by run
	ps       *redis.PubSub            // not a Cluster: the one subscription
	remadeAt time.Time                // not a Cluster: when ps was last made anew
	shards   map[string]*redis.PubSub // Cluster: master address -> its subscription
	where    map[string]*redis.PubSub // Cluster: channel -> the subscription it is on
}

type subOp struct {
	channel string
	on      bool
	// moved counts the tries to subscribe a channel again that its node
	// ended (its slot moved), 0 for a channel asked for by a waiter.
	moved int
	// rehome: the channel's subscription may be on a node that is no
	// longer its master; tried once, the caller asks again. passedOver:
	// because a handoff passed a waiter over (notifier.rehome).
	rehome, passedOver bool
	// broken, with no channel: a Cluster subscription whose connection
	// failed; its channels are rehomed.
	broken *redis.PubSub
}

// movedTries bounds how often, movedRetry apart, a channel whose slot moved
// is tried again while the client's map of the Cluster still names the old
// node: reloading the map takes a round trip or two.
const (
	movedTries = 40
	movedRetry = 50 * time.Millisecond
)

func newSubscriber(n *notifier, rdb redis.UniversalClient) *subscriber {
	s := &subscriber{n: n, rdb: rdb, kick: make(chan struct{}, 1), retired: map[*redis.PubSub]bool{},
		shards: map[string]*redis.PubSub{}, where: map[string]*redis.PubSub{}}
	s.cluster, _ = rdb.(*redis.ClusterClient)
	n.wg.Add(1)
	go s.run()
	return s
}

// request asks for channel to be subscribed (on) or unsubscribed.
func (s *subscriber) request(channel string, on bool) {
	s.enqueue(subOp{channel: channel, on: on})
}

func (s *subscriber) enqueue(op subOp) {
	s.mu.Lock()
	s.ops = append(s.ops, op)
	s.mu.Unlock()
	signal(s.kick)
}

func (s *subscriber) run() {
	defer s.n.wg.Done()
	defer s.closeAll()
	for {
		select {
		case <-s.n.ctx.Done():
			return
		case <-s.kick:
		}
		s.mu.Lock()
		ops := s.ops
		s.ops = nil
		s.mu.Unlock()
		for _, op := range ops {
			switch {
			case op.broken != nil:
				s.rehomeAll(op.broken)
			case s.cluster != nil:
				s.applySharded(op)
			case op.rehome:
				s.remake(op.channel)
			default:
				s.apply(op)
			}
		}
	}
}

// apply changes the node's one subscription. Errors are left to go-redis,
// which keeps the channel set and resubscribes when it reconnects.
func (s *subscriber) apply(op subOp) {
	ctx := s.n.ctx
	if s.ps == nil {
		s.ps = s.rdb.Subscribe(ctx)
		s.listen(s.ps)
	}
	if op.on {
		_ = s.ps.Subscribe(ctx, op.channel)
	} else {
		_ = s.ps.Unsubscribe(ctx, op.channel)
	}
}

// errPassedOver is the Err of the EventResubscribed of a subscription
// moved because a handoff passed one of its waiters over.
var errPassedOver = errors.New("distlock: a handoff passed a waiter over, as nobody heard its Client: subscribing again on the master")

// rehomeEvery bounds how often a subscription that is not on a Cluster is
// made anew (remake) because handoffs went unheard.
const rehomeEvery = time.Second

// remake replaces the one subscription, which handoffs do not reach: its
// node is no longer the master. A Sentinel-managed master that was demoted
// without being killed (a SENTINEL FAILOVER, or a restart in time to come
// back before its failover ended) keeps its pub/sub clients as a replica,
// and go-redis, which moves its pooled connections at a failover, leaves
// a PubSub where it is. The new one is dialled the way every connection
// is, to the master Sentinel names now. Its waiters are woken to ask Redis
// once the channels are confirmed again.
func (s *subscriber) remake(channel string) {
	if s.ps == nil || time.Since(s.remadeAt) < rehomeEvery {
		return
	}
	s.remadeAt = time.Now()
	// A PUBLISH on the master that counts a listener: the subscription is
	// there, and the waiter was passed over for another cause (its deadline
	// by the releaser's clock, a reconnect since): nothing to move. ("p" is
	// ignored by Clients: see deliver.)
	ctx, cancel := context.WithTimeout(s.n.ctx, time.Second)
	heard, err := s.rdb.Publish(ctx, channel, "p").Result()
	cancel()
	if err == nil && heard > 0 {
		return
	}
	s.n.c.observe(context.Background(), Event{Kind: EventResubscribed, Err: errPassedOver})
	old := s.ps
	s.retire(old)
	s.n.disconnected(old)
	s.ps = s.rdb.Subscribe(s.n.ctx)
	s.listen(s.ps)
	if chans := s.n.channels(); len(chans) > 0 {
		_ = s.ps.Subscribe(s.n.ctx, chans...)
	}
}

// rehomeAll rehomes every channel on ps, a Cluster subscription whose
// connection failed: a master that was killed ends none of them, and
// go-redis would redial its address for as long as the Client lives. Its
// listener asks again on every failure of a redial (at most a second
// apart, or DialTimeout on a hung address) until they are all moved and
// ps is closed.
func (s *subscriber) rehomeAll(ps *redis.PubSub) {
	var chans []string
	for ch, p := range s.where {
		if p == ps {
			chans = append(chans, ch)
		}
	}
	for _, ch := range chans {
		// (broken: no SUNSUBSCRIBE on ps, which would redial the dead
		// address, a dial timeout a channel in this one goroutine)
		s.applySharded(subOp{channel: ch, on: true, rehome: true, broken: ps})
	}
}

// applySharded puts a channel on the subscription of its slot's master.
// If the master cannot be found, the channel's waiters still ask Redis on
// their timers.
func (s *subscriber) applySharded(op subOp) {
	ctx := s.n.ctx
	old := s.where[op.channel]
	delete(s.where, op.channel)
	if !op.on {
		if old != nil {
			_ = old.SUnsubscribe(ctx, op.channel)
			s.closeIfUnused(old)
		}
		return
	}
	node, err := s.cluster.MasterForKey(ctx, op.channel)
	if err != nil {
		return
	}
	addr := node.Options().Addr
	ps := s.shards[addr]
	if (op.moved > 0 || op.rehome) && ps != nil && ps == old {
		// Its node ended the subscription, the slot moved (or it failed,
		// or handoffs went unheard), but the map of the Cluster still names
		// that node: the map is reloaded, and the channel tried again
		// shortly (a rehome when its caller asks again).
		s.where[op.channel] = old
		s.cluster.ReloadState(ctx)
		if op.moved > 0 && op.moved < movedTries {
			op.moved++
			time.AfterFunc(movedRetry, func() {
				if s.n.wanted(op.channel) { // (not pruned meanwhile)
					s.enqueue(op)
				}
			})
		}
		return
	}
	if ps == nil {
		ps = node.SSubscribe(ctx)
		s.shards[addr] = ps
		s.listen(ps)
	}
	if old != nil && old != ps {
		if op.passedOver {
			s.n.c.observe(context.Background(), Event{Kind: EventResubscribed, Err: errPassedOver})
		}
		if op.broken == nil {
			_ = old.SUnsubscribe(ctx, op.channel)
		}
		s.closeIfUnused(old)
	}
	s.where[op.channel] = ps
	_ = ps.SSubscribe(ctx, op.channel)
}

// closeIfUnused closes ps, a Cluster subscription, once no channel is on
// it: one left on a node that is no longer a master (killed, or demoted)
// would redial it, or listen there, for as long as the Client lives.
func (s *subscriber) closeIfUnused(ps *redis.PubSub) {
	for _, p := range s.where {
		if p == ps {
			return
		}
	}
	for addr, p := range s.shards {
		if p == ps {
			delete(s.shards, addr)
		}
	}
	s.retire(ps)
}

// retire closes ps, whose listener then ends: the read it may be blocked
// in fails with the connection, not with redis.ErrClosed.
func (s *subscriber) retire(ps *redis.PubSub) {
	s.mu.Lock()
	s.retired[ps] = true
	s.mu.Unlock()
	// In the background: Close waits for the PubSub's lock, which its
	// listener holds while it redials (a hung address: until DialTimeout or
	// ReadTimeout).
	go func() { _ = ps.Close() }()
}

// ended reports whether ps was retired, and forgets it: its listener
// calls it once, as it ends.
func (s *subscriber) ended(ps *redis.PubSub) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.retired[ps] {
		return false
	}
	delete(s.retired, ps)
	return true
}

func (s *subscriber) closeAll() {
	if s.ps != nil {
		_ = s.ps.Close()
	}
	for _, ps := range s.shards {
		_ = ps.Close()
	}
}

// listen reads ps until the notifier closes. A broken connection wakes all
// waiters, then go-redis reconnects and resubscribes on the next Receive;
// the first answer after that renews every lock the Client holds (see
// renewer.renewAll).
func (s *subscriber) listen(ps *redis.PubSub) {
	n := s.n
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		backoff := time.Millisecond
		broken := false
		for {
			msg, err := ps.Receive(n.ctx)
			if err != nil {
				if n.ctx.Err() != nil || s.ended(ps) {
					return // (retired: made anew, or its channels moved)
				}
				if s.cluster != nil {
					s.enqueue(subOp{broken: ps})
				}
				broken = true
				if backoff == time.Millisecond { // the first failure since an answer
					n.c.observe(context.Background(), Event{Kind: EventResubscribed, Err: err})
				}
				n.disconnected(ps)
				t := time.NewTimer(backoff)
				select {
				case <-n.ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			backoff = time.Millisecond
			if broken { // an answer on a new connection
				broken = false
				n.c.renewAll()
			}
			switch m := msg.(type) {
			case *redis.Message:
				n.deliver(m.Channel, m.Payload)
			case *redis.Subscription:
				switch m.Kind {
				case "subscribe", "ssubscribe":
					n.confirmed(m.Channel, ps)
				case "unsubscribe", "sunsubscribe":
					if n.unsubscribed(m.Channel, ps) {
						s.enqueue(subOp{channel: m.Channel, on: true, moved: 1})
					}
				}
			}
		}
	}()
}
