package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// servers starts n independent redis-servers on free loopback ports in
// temporary directories. stop kills them and removes the directories.
func servers(n int) (addrs []string, stop func(), err error) {
	var started []*redistest.Server
	var dirs []string
	stop = func() {
		for _, s := range started {
			s.Kill()
		}
		for _, d := range dirs {
			_ = os.RemoveAll(d)
		}
	}
	for i := 0; i < n; i++ {
		dir, err := os.MkdirTemp("", "distlock-bench-")
		if err != nil {
			stop()
			return nil, nil, err
		}
		dirs = append(dirs, dir)
		s, err := redistest.Launch(dir)
		if err != nil {
			stop()
			return nil, nil, err
		}
		started = append(started, s)
		addrs = append(addrs, s.Addr)
	}
	return addrs, stop, nil
}

// admin is a plain client for flushing, statistics and expiry snapshots; its
// commands are excluded from the per-acquisition counts.
type admin struct{ rdb *redis.Client }

func newAdmin(addr string) *admin {
	return &admin{rdb: redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})}
}

func (a *admin) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

func (a *admin) flush() error {
	ctx, cancel := a.ctx()
	defer cancel()
	return a.rdb.FlushAll(ctx).Err()
}

// serverStats reads the server's CPU (used_cpu_sys + used_cpu_user, the
// main process and its threads) and every command's call count from one
// INFO. Scripts' inner calls are counted under their own command names as
// well as the EVALSHA/EVAL that ran them.
func (a *admin) serverStats() (cpu time.Duration, calls map[string]int64, err error) {
	ctx, cancel := a.ctx()
	defer cancel()
	info, err := a.rdb.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return 0, nil, err
	}
	calls = map[string]int64{}
	var secs float64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_sys" || name == "used_cpu_user":
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				return 0, nil, fmt.Errorf("INFO cpu %s: %w", line, err)
			}
			secs += v
		case strings.HasPrefix(name, "cmdstat_"):
			var n int64
			if _, err := fmt.Sscanf(val, "calls=%d", &n); err == nil {
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return time.Duration(secs * float64(time.Second)), calls, nil
}

// keyCounts returns how many keys have a TTL (leases, waiting lines: what a
// lock leaves behind) and how many have none (bookkeeping such as fence
// counters).
func (a *admin) keyCounts() (withTTL, without int, err error) {
	ctx, cancel := a.ctx()
	defer cancel()
	keys, err := a.rdb.Keys(ctx, "*").Result()
	if err != nil {
		return 0, 0, err
	}
	pipe := a.rdb.Pipeline()
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		ttls[i] = pipe.PTTL(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return 0, 0, err
	}
	for _, t := range ttls {
		switch d := t.Val(); {
		case d > 0:
			withTTL++
		case d == -1: // go-redis reports "no TTL" as -1ns
			without++
		}
	}
	return withTTL, without, nil
}

// leases returns every key that has a TTL and its absolute expiry (unix ms).
func (a *admin) leases() (map[string]int64, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	keys, err := a.rdb.Keys(ctx, "*").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, k := range keys {
		ms, err := a.rdb.Do(ctx, "PEXPIRETIME", k).Int64()
		if err != nil {
			return nil, err
		}
		if ms > 0 {
			out[k] = ms
		}
	}
	return out, nil
}

// expiry returns the latest expiry (unix ms) among keys, which were the
// holder's lease keys: the moment its lease is over. A key that is already
// gone keeps the expiry seen before (from).
func (a *admin) expiry(keys map[string]int64) (int64, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	var latest int64 = -1
	for k, before := range keys {
		ms, err := a.rdb.Do(ctx, "PEXPIRETIME", k).Int64()
		if err != nil {
			return 0, err
		}
		latest = max(latest, ms, before)
	}
	if latest <= 0 {
		return 0, fmt.Errorf("no lease keys")
	}
	return latest, nil
}

func (a *admin) version() string {
	ctx, cancel := a.ctx()
	defer cancel()
	info, err := a.rdb.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}
