package main

import (
	"testing"
	"time"
)

// TestHeartbeatGivesUpSilentKeeper: a keeper that answers is never given
// up; one that falls silent is given up heartbeatMisses windows after the
// first unanswered ping, within half a TTL of its last answer.
func TestHeartbeatGivesUpSilentKeeper(t *testing.T) {
	const ttl = 6 * time.Second
	now := time.Unix(1000, 0)
	h := newHeartbeat(ttl, now)
	for range 10 { // an answering keeper: ping, answer
		now = h.due
		if h.fired(now) {
			t.Fatal("an answering keeper was given up")
		}
		now = now.Add(time.Millisecond)
		h.answered(now)
	}
	lastAnswer := now
	firstPing := h.due
	for !h.fired(h.due) {
		if h.due.Sub(lastAnswer) > ttl {
			t.Fatal("a silent keeper was never given up")
		}
	}
	if gave := h.due.Sub(lastAnswer); gave > ttl/2 {
		t.Errorf("given up %v after its last answer, want at most %v", gave, ttl/2)
	}
	if s, want := h.silence(h.due), h.due.Sub(firstPing); s != want || s != heartbeatMisses*h.every {
		t.Errorf("silence %v, want %v: since the first unanswered ping", s, want)
	}
}

// TestHeartbeatLateTimerProvesNothing: a timer that fires late means the
// runner itself was stopped (Ctrl-Z) or starved, so the window it ends is
// not counted against the keeper, however often that happens.
func TestHeartbeatLateTimerProvesNothing(t *testing.T) {
	now := time.Unix(1000, 0)
	h := newHeartbeat(time.Second, now)
	for range 10 {
		now = h.due.Add(5 * h.every) // the runner was stopped meanwhile
		if h.fired(now) {
			t.Fatal("a late timer counted as a silent keeper")
		}
	}
	// On-time windows count again: a first miss, then the give-up.
	if h.fired(h.due) {
		t.Fatal("one on-time window gave the keeper up")
	}
	if !h.fired(h.due) {
		t.Fatal("two on-time windows did not give the keeper up")
	}
	// The silence counts from the last late timer's ping, not the first.
	if s := h.silence(h.due); s != heartbeatMisses*h.every {
		t.Errorf("silence %v, want the %v of the windows counted", s, heartbeatMisses*h.every)
	}
}

// TestHeartbeatShortTTL: the window never drops below heartbeatMin.
func TestHeartbeatShortTTL(t *testing.T) {
	if h := newHeartbeat(minTTL, time.Now()); h.every != heartbeatMin {
		t.Fatalf("window %v for a %v TTL, want %v", h.every, minTTL, heartbeatMin)
	}
}
