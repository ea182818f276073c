package main

import (
	"context"
	"fmt"
	"os"
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

func (a *admin) resetStats() error {
	ctx, cancel := a.ctx()
	defer cancel()
	return a.rdb.ConfigResetStat(ctx).Err()
}

// calls sums the calls of every command in INFO commandstats, including the
// ones scripts make, except the bench's own CONFIG and INFO.
func (a *admin) calls() (int64, error) {
	ctx, cancel := a.ctx()
	defer cancel()
	info, err := a.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		name, rest, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		var n int64
		if _, err := fmt.Sscanf(rest, "calls=%d", &n); err == nil {
			total += n
		}
	}
	return total, nil
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
