package main

import (
	"context"
	"log/slog"
	"strconv"
	"strings"

	"github.com/distlock/distlock"
)

// held is what the keeper holds while COMMAND runs, whichever primitive it
// is: one *distlock.Lock (a lock, a read or write hold, a permit, a
// leadership) or a *distlock.MultiLock for several KEYs.
type held struct {
	lost    <-chan struct{} // closed when (any part of) it is lost
	err     func() error    // the cause of the loss
	release func(context.Context) error
	fences  []int64  // in the order of cfg.keys
	tokens  []string // likewise
}

func heldLock(l *distlock.Lock) *held {
	return &held{lost: l.Lost(), err: l.Err, release: l.Release,
		fences: []int64{l.Fence()}, tokens: []string{l.Token()}}
}

// heldAll is the locks of m, whose fences and tokens are given in the
// order of keys (m has them in the order of their names).
func heldAll(m *distlock.MultiLock, keys []string) *held {
	byKey := map[string]*distlock.Lock{}
	for _, l := range m.Locks() {
		byKey[l.Key()] = l
	}
	h := &held{lost: m.Lost(), err: m.Err, release: m.Release}
	for _, k := range keys {
		h.fences = append(h.fences, byKey[k].Fence())
		h.tokens = append(h.tokens, byKey[k].Token())
	}
	return h
}

// fenceList is the fences separated by sep.
func (h *held) fenceList(sep string) string {
	s := make([]string, len(h.fences))
	for i, f := range h.fences {
		s[i] = strconv.FormatInt(f, 10)
	}
	return strings.Join(s, sep)
}

// fenceAttr is the fence in JSON messages: "fence", or "fences" in the
// order of the KEYs when there are several.
func (h *held) fenceAttr() slog.Attr {
	if len(h.fences) == 1 {
		return aFence(h.fences[0])
	}
	return slog.Any("fences", h.fences)
}

// take asks for what cfg holds: at once if try, else waiting until ctx
// ends. Errors are the library's (a quorum Client refuses every primitive
// but plain locks with ErrInvalidOption, a semaphore in use with another
// limit too).
func (cfg *runConfig) take(ctx context.Context, conn *connection, opts []distlock.Option, try bool) (*held, error) {
	c, key := conn.locks, cfg.keys[0]
	var (
		l   *distlock.Lock
		err error
	)
	switch cfg.mode {
	case holdRead, holdWrite:
		var rw *distlock.RWMutex
		if rw, err = c.NewRWMutex(key); err != nil {
			return nil, err
		}
		get := rw.RLock
		switch {
		case cfg.mode == holdRead && try:
			get = rw.TryRLock
		case cfg.mode == holdWrite && try:
			get = rw.TryLock
		case cfg.mode == holdWrite:
			get = rw.Lock
		}
		l, err = get(ctx, opts...)
	case holdPermit:
		var sem *distlock.Semaphore
		if sem, err = c.NewSemaphore(key, cfg.limit); err != nil {
			return nil, err
		}
		get := sem.Acquire
		if try {
			get = sem.TryAcquire
		}
		l, err = get(ctx, opts...)
	case holdLeader:
		// No try: checkMode refuses --wait 0 for elect.
		var e *distlock.Election
		if e, err = c.NewElection(key); err != nil {
			return nil, err
		}
		var lead *distlock.Leadership
		if lead, err = e.Campaign(ctx, cfg.value, opts...); err != nil {
			return nil, err
		}
		l = lead.Lock
	case holdLock:
		if len(cfg.keys) > 1 {
			all := c.LockAll
			if try {
				all = c.TryLockAll
			}
			m, err := all(ctx, cfg.keys, opts...)
			if err != nil {
				return nil, err
			}
			return heldAll(m, cfg.keys), nil
		}
		get := c.Lock
		if try {
			get = c.TryLock
		}
		l, err = get(ctx, key, opts...)
	}
	if err != nil {
		return nil, err
	}
	return heldLock(l), nil
}
