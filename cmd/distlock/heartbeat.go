package main

import "time"

// The runner pings its keeper while COMMAND runs, because a keeper that is
// stopped (SIGSTOP, a debugger) or hung renews nothing but keeps its pipe
// open: without an answer the runner could not tell it from a keeper at
// work, and COMMAND would run on past the lease. Pinging, rather than the
// keeper reporting each renewal, keeps the pipe empty while a Ctrl-Z'd
// runner reads nothing (a keeper writing into a full pipe would block).
const (
	// heartbeatMisses unanswered windows in a row make the keeper stalled.
	heartbeatMisses = 2
	// heartbeatMin bounds a window from below, so that a short TTL on a
	// busy machine does not take a slow answer for a stalled keeper.
	heartbeatMin = 100 * time.Millisecond
)

// heartbeat decides when the runner pings its keeper and when it gives a
// silent one up. A window is TTL/6 (at least heartbeatMin): a keeper that
// stops right after an answer is pinged one window later and given up two
// windows after that, half a TTL on, before the lease it last renewed (at
// least two thirds of a TTL after it stopped) runs out.
type heartbeat struct {
	every  time.Duration // the pause between an answer and the next ping; a ping's window
	due    time.Time     // when the runner's timer is set to fire
	out    bool          // a ping is unanswered
	misses int           // windows in a row that ended without an answer
	asked  time.Time     // when the first ping those windows count from went out
}

func newHeartbeat(ttl time.Duration, now time.Time) *heartbeat {
	h := &heartbeat{every: max(ttl/6, heartbeatMin)}
	h.due = now.Add(h.every)
	return h
}

// fired is the runner's timer firing at now. It reports whether the keeper
// is stalled; if not, the runner pings it and sets the timer to h.due.
func (h *heartbeat) fired(now time.Time) (stalled bool) {
	switch {
	case !h.out:
		h.out, h.asked = true, now
	case now.Sub(h.due) > h.every/2:
		// The timer fired late: the runner itself was stopped (Ctrl-Z
		// stops the job, runner included) or starved, and the answer
		// may be waiting unread. This window proves nothing; ask again.
		h.misses, h.asked = 0, now
	default:
		h.misses++
	}
	if h.misses >= heartbeatMisses {
		return true
	}
	h.due = now.Add(h.every)
	return false
}

// answered is the keeper's answer arriving at now; the runner sets its
// timer to h.due.
func (h *heartbeat) answered(now time.Time) {
	h.out, h.misses = false, 0
	h.due = now.Add(h.every)
}

// silence is, at now, how long the keeper has left the pings unanswered
// that count against it: since the first of them went out, not counting a
// time the runner itself was stopped before it asked again.
func (h *heartbeat) silence(now time.Time) time.Duration { return now.Sub(h.asked) }
