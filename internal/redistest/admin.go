package redistest

import (
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// admins caches one small client per server for the harness' own admin
// commands and polling, so that waits do not open a connection per poll.
type admins struct {
	mu sync.Mutex
	m  map[*Server]*redis.Client
}

func (a *admins) get(s *Server) *redis.Client {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = make(map[*Server]*redis.Client)
	}
	c, ok := a.m[s]
	if !ok {
		// Short timeouts keep a poll of a stopped or dead server from
		// eating the whole wait budget.
		c = redis.NewClient(&redis.Options{
			Addr: s.Addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second,
			WriteTimeout: 2 * time.Second, PoolSize: 2, MaxRetries: -1,
		})
		a.m[s] = c
	}
	return c
}

func (a *admins) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.m {
		_ = c.Close()
	}
	a.m = nil
}
