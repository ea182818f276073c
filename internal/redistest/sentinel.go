package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// MasterName is the name under which the harness' Sentinels monitor their
// master.
const MasterName = "distlock-test"

// replTimeout bounds every wait for replication or Sentinel to settle.
const replTimeout = 20 * time.Second

// ReplicaSet is a master with one replica. Promote and Reattach swap their
// roles the way a failover does, without Sentinel.
type ReplicaSet struct {
	// Master and Replica are the current roles.
	Master, Replica *Server

	admin admins
}

// StartReplicaSet starts a master and a replica in sync with it; both are
// killed in t.Cleanup. Diskless sync without delay makes re-syncs after a
// role swap take milliseconds.
func StartReplicaSet(t testing.TB) *ReplicaSet {
	t.Helper()
	args := []string{"--repl-diskless-sync-delay", "0"}
	rs := &ReplicaSet{}
	t.Cleanup(rs.admin.close)
	rs.Master = Start(t, args...)
	rs.Replica = rs.Master.StartReplica(t, args...)
	return rs
}

// Admin returns a harness client for s (no context timeouts, short socket
// timeouts); the ReplicaSet closes it.
func (rs *ReplicaSet) Admin(s *Server) *redis.Client { return rs.admin.get(s) }

// Promote makes the replica a master (REPLICAOF NO ONE), as a failover does,
// and returns it. The old master keeps running as a master until Reattach:
// a client still talking to it sees a split brain, as in a real partition.
func (rs *ReplicaSet) Promote(t testing.TB) *Server {
	t.Helper()
	r := rs.Replica
	if err := rs.Admin(r).ReplicaOf(context.Background(), "NO", "ONE").Err(); err != nil {
		t.Fatalf("redistest: REPLICAOF NO ONE on %s: %v", r.Addr, err)
	}
	rs.Master, rs.Replica = r, rs.Master
	return r
}

// PromoteDuring promotes the replica concurrently with fn, sending
// REPLICAOF NO ONE after delay, and returns it once both are done: the
// promotion races whatever fn writes to the master.
func (rs *ReplicaSet) PromoteDuring(t testing.TB, delay time.Duration, fn func()) *Server {
	t.Helper()
	r := rs.Replica
	errc := make(chan error, 1)
	go func() {
		time.Sleep(delay) // the offset of the race under test
		errc <- rs.Admin(r).ReplicaOf(context.Background(), "NO", "ONE").Err()
	}()
	fn()
	if err := <-errc; err != nil {
		t.Fatalf("redistest: REPLICAOF NO ONE on %s: %v", r.Addr, err)
	}
	rs.Master, rs.Replica = r, rs.Master
	return r
}

// Reattach makes the old master a replica of the promoted one and waits
// until it is in sync, ready for the next Promote.
func (rs *ReplicaSet) Reattach(t testing.TB) {
	t.Helper()
	m, r := rs.Master, rs.Replica
	if err := rs.Admin(r).ReplicaOf(context.Background(), "127.0.0.1", strconv.Itoa(m.Port)).Err(); err != nil {
		t.Fatalf("redistest: REPLICAOF on %s: %v", r.Addr, err)
	}
	rs.WaitInSync(t)
}

// WaitInSync waits until the replica's link to the master is up and the
// master counts it as an online replica.
func (rs *ReplicaSet) WaitInSync(t testing.TB) {
	t.Helper()
	m, r := rs.Master, rs.Replica
	waitFor(t, fmt.Sprintf("%s to replicate %s", r.Addr, m.Addr), replTimeout, func() error {
		info, err := rs.Admin(r).Info(context.Background(), "replication").Result()
		if err != nil {
			return err
		}
		if infoField(info, "master_port") != strconv.Itoa(m.Port) || infoField(info, "master_link_status") != "up" {
			return fmt.Errorf("replica: master port %s, link %s", infoField(info, "master_port"), infoField(info, "master_link_status"))
		}
		info, err = rs.Admin(m).Info(context.Background(), "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(infoField(info, "slave0"), "port="+strconv.Itoa(r.Port)+",state=online") {
			return fmt.Errorf("master: slave0 %q", infoField(info, "slave0"))
		}
		return nil
	})
}

// Sentinel is a ReplicaSet monitored by three Sentinels (quorum 2).
type Sentinel struct {
	*ReplicaSet
	// Sentinels are the redis-server --sentinel processes.
	Sentinels []*Server
}

// StartSentinel starts a master, one replica and three Sentinels with
// quorum 2, down-after-milliseconds 1000 and failover-timeout 5000, and
// waits until every Sentinel knows the replica and the two other Sentinels.
// Everything is killed in t.Cleanup.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	s := &Sentinel{ReplicaSet: StartReplicaSet(t)}
	for range 3 {
		sn, err := launchSentinel(t.TempDir(), s.Master.Port)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		t.Cleanup(sn.Kill)
		s.Sentinels = append(s.Sentinels, sn)
	}
	// Sentinels find each other through hello messages every 2s.
	waitFor(t, "the Sentinels to know each other and the replica", replTimeout, func() error {
		for _, sn := range s.Sentinels {
			m, err := s.Admin(sn).Do(context.Background(), "SENTINEL", "MASTER", MasterName).Result()
			if err != nil {
				return fmt.Errorf("%s: %w", sn.Addr, err)
			}
			f := sentinelFields(m)
			if f["flags"] != "master" || f["num-slaves"] != "1" || f["num-other-sentinels"] != "2" {
				return fmt.Errorf("%s: flags %s, replicas %s, other sentinels %s", sn.Addr, f["flags"], f["num-slaves"], f["num-other-sentinels"])
			}
		}
		return nil
	})
	return s
}

// SentinelAddrs returns the Sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr
	}
	return addrs
}

// FailoverClient returns a Sentinel-backed client for the master
// (redis.NewFailoverClient), closed in t.Cleanup.
func (s *Sentinel) FailoverClient(t testing.TB) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            MasterName,
		SentinelAddrs:         s.SentinelAddrs(),
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Failover forces a Sentinel failover (SENTINEL FAILOVER, which needs no
// agreement), waits until every Sentinel names the replica as master, then
// re-attaches the old master as a replica of the new one and waits until it
// is in sync. It returns the new master. Sentinel itself would re-attach the
// old master only after a grace period of several seconds; doing it here
// keeps tests fast and leaves a replica for WAIT.
func (s *Sentinel) Failover(t testing.TB) *Server {
	t.Helper()
	want := s.Replica
	if err := s.Admin(s.Sentinels[0]).Do(context.Background(), "SENTINEL", "FAILOVER", MasterName).Err(); err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	waitFor(t, fmt.Sprintf("every Sentinel to name %s master", want.Addr), replTimeout, func() error {
		for _, sn := range s.Sentinels {
			addr, err := s.Admin(sn).Do(context.Background(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName).StringSlice()
			if err != nil {
				return fmt.Errorf("%s: %w", sn.Addr, err)
			}
			if len(addr) != 2 || net.JoinHostPort(addr[0], addr[1]) != want.Addr {
				return fmt.Errorf("%s names %v", sn.Addr, addr)
			}
		}
		info, err := s.Admin(want).Info(context.Background(), "replication").Result()
		if err != nil {
			return err
		}
		if r := infoField(info, "role"); r != "master" {
			return fmt.Errorf("%s has role %s", want.Addr, r)
		}
		return nil
	})
	s.Master, s.Replica = want, s.Master
	s.Reattach(t)
	return want
}

// launchSentinel starts redis-server --sentinel with a generated config in
// dir, monitoring the master on masterPort. The caller must Kill it.
func launchSentinel(dir string, masterPort int) (*Server, error) {
	p, err := redisproc.LaunchWith(dir, func(port int) ([]string, error) {
		conf := filepath.Join(dir, "sentinel.conf") // Sentinel rewrites it
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
daemonize no
dir %s
logfile redis.log
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %[3]s 1000
sentinel failover-timeout %[3]s 5000
sentinel parallel-syncs %[3]s 1
`, port, dir, MasterName, masterPort)
		return []string{conf, "--sentinel"}, os.WriteFile(conf, []byte(text), 0o600)
	})
	if err != nil {
		return nil, fmt.Errorf("start sentinel: %w", err)
	}
	return &Server{p}, nil
}

// sentinelFields turns a SENTINEL MASTER reply (a flat name/value list in
// RESP2, a map in RESP3) into a map.
func sentinelFields(reply any) map[string]string {
	f := map[string]string{}
	switch v := reply.(type) {
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			f[fmt.Sprint(v[i])] = fmt.Sprint(v[i+1])
		}
	case map[any]any:
		for k, x := range v {
			f[fmt.Sprint(k)] = fmt.Sprint(x)
		}
	}
	return f
}
