package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

// holderText describes who holds what cfg asks for, for the "waiting" and
// "not obtained" messages, as text and as JSON attributes. busy is false if
// it found no holder: the holder left meanwhile, Redis did not answer in
// time, or only others waiting ahead in line are in the way. pid is the
// runner's, whose own grant is no other holder (below).
func holderText(conn *connection, cfg *runConfig, pid int) (string, []slog.Attr, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if cfg.mode == holdLock {
		// Inspect is one read per KEY; the others' holds are only found by
		// List, a scan. On a quorum it reads the first server, where this
		// run's failed attempt may still stand (the library gives it back
		// in the background) when that server lacks the majority's grant:
		// a grant with this run's metadata is not the holder.
		self := cfg.metadata(pid)
		for _, k := range cfg.keys {
			if info, err := conn.locks.Inspect(ctx, k); err == nil && info.Held() && info.Meta != self {
				return describeHolder(info, 1)
			}
		}
		if len(cfg.keys) > 1 {
			return "one of " + cfg.quoted() + " is held by another owner", nil, false
		}
		return cfg.quoted() + " is held by another owner", nil, false
	}
	key := cfg.keys[0]
	infos, _ := conn.locks.List(ctx, globQuote(key))
	var holds []distlock.LockInfo
	for _, in := range infos {
		if in.Key == key && slices.Contains(cfg.holdKinds(), in.Kind) {
			holds = append(holds, in)
		}
	}
	switch {
	case len(holds) > 0:
		return describeHolder(holds[0], len(holds))
	case cfg.mode == holdLeader:
		return "nobody leads " + cfg.quoted(), nil, false
	}
	return cfg.quoted() + " is busy (others wait ahead in line)", nil, false
}

// holdKinds are the kinds of LockInfo that stand in the way of cfg's mode.
func (cfg *runConfig) holdKinds() []string {
	switch cfg.mode {
	case holdRead, holdWrite:
		return []string{"read", "write"}
	case holdPermit:
		return []string{"permit"}
	case holdLeader:
		return []string{"leader"}
	}
	return []string{"lock"}
}

// describeHolder describes the hold in, the first of n holds of its name:
// `"k" is held (fence 17, host=web-2 pid=4242 cmd=deploy.sh, for 3m12s)`;
// other kinds than a plain lock are named in the parentheses.
func describeHolder(in distlock.LockInfo, n int) (string, []slog.Attr, bool) {
	attrs := []slog.Attr{slog.Int64("holder_fence", in.Fence), slog.String("holder", in.Meta)}
	var b strings.Builder
	fmt.Fprintf(&b, "%q ", in.Key)
	switch in.Kind {
	case "leader":
		fmt.Fprintf(&b, "has a leader (term %d", in.Fence)
	case "permit":
		fmt.Fprintf(&b, "has no free permit (permit of %d, fence %d", in.Limit, in.Fence)
	case "read", "write":
		fmt.Fprintf(&b, "is held (%s, fence %d", in.Kind, in.Fence)
	default:
		fmt.Fprintf(&b, "is held (fence %d", in.Fence)
	}
	if in.Meta != "" {
		// Written by any holder: no control characters to the terminal,
		// as in status (the JSON attribute is escaped by its encoder).
		b.WriteString(", " + printable(in.Meta))
	}
	if !in.Since.IsZero() {
		b.WriteString(", for " + time.Since(in.Since).Round(time.Second).String())
	}
	if n > 1 {
		fmt.Fprintf(&b, "; and %d more", n-1)
	}
	b.WriteString(")")
	return b.String(), attrs, true
}

// globQuote makes s a Redis glob that matches s alone.
func globQuote(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
