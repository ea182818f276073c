package distlock

import (
	"context"
	"sync"
)

// contexts are the live contexts that a Lock's or a MultiLock's Context
// gave out. Their owner cancels them all under its mutex when the hold
// ends, before it closes Lost, so that they are done by the time Lost is
// closed; each is forgotten as soon as it is done.
type contexts struct {
	cancels map[uint64]context.CancelCauseFunc
	next    uint64
}

// add keeps cancel, ctx's, until ctx is done; mu is the owner's mutex,
// held by the caller.
func (c *contexts) add(mu *sync.Mutex, ctx context.Context, cancel context.CancelCauseFunc) {
	if c.cancels == nil {
		c.cancels = map[uint64]context.CancelCauseFunc{}
	}
	id := c.next
	c.next++
	c.cancels[id] = cancel
	context.AfterFunc(ctx, func() {
		mu.Lock()
		delete(c.cancels, id)
		mu.Unlock()
	})
}

// cancelAll cancels every context kept with cause and forgets them.
func (c *contexts) cancelAll(cause error) {
	for _, cancel := range c.cancels {
		cancel(cause)
	}
	c.cancels = nil
}
