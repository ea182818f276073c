package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterNodeTimeout is the cluster-node-timeout of the harness, in
// milliseconds: small so that failure detection is quick, large enough that a
// busy 2-core machine running -race does not see spurious failures.
const clusterNodeTimeout = 1500

// clusterTimeout bounds cluster creation and every wait for the cluster to
// settle.
const clusterTimeout = 60 * time.Second

// Cluster is a real Redis Cluster of redis-server processes on loopback,
// joined with `redis-cli --cluster create`.
type Cluster struct {
	// Nodes are all the servers, in start order. Roles change with Failover;
	// ask Masters for the current ones.
	Nodes []*Server

	admin admins
}

// StartCluster starts masters×(1+replicasPerMaster) cluster-enabled servers,
// joins them with redis-cli, and waits until every node reports
// cluster_state:ok with all 16384 slots covered and every replica is in sync.
// Everything is killed in t.Cleanup.
func StartCluster(t testing.TB, masters, replicasPerMaster int) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redistest: redis-cli not found in PATH: run `make test`, which installs it (Debian: apt-get install -y redis-tools)")
	}
	c := &Cluster{}
	t.Cleanup(c.admin.close)
	// Replicas sync by diskless transfer without the default 5s delay.
	args := []string{
		"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.Itoa(clusterNodeTimeout),
		"--repl-diskless-sync-delay", "0",
	}
	addrs := make([]string, 0, masters*(1+replicasPerMaster))
	for range masters * (1 + replicasPerMaster) {
		// An explicit bus port: the default, port+10000, can collide with
		// another test's server or exceed 65535.
		bus, err := FreePort()
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s := Start(t, append(args, "--cluster-port", strconv.Itoa(bus))...)
		c.Nodes = append(c.Nodes, s)
		addrs = append(addrs, s.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	cmdArgs := append([]string{"--cluster", "create"}, addrs...)
	cmdArgs = append(cmdArgs, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	out, err := exec.CommandContext(ctx, "redis-cli", cmdArgs...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitStable(t)
	if got := len(c.Masters(t)); got != masters {
		t.Fatalf("redistest: cluster has %d masters, want %d", got, masters)
	}
	return c
}

// Client returns a cluster client seeded with every node, closed in
// t.Cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	return c.ClientVia(t, c.Nodes...)
}

// ClientVia returns a cluster client that knows only seeds at first and
// learns the rest of the cluster from them; closed in t.Cleanup.
func (c *Cluster) ClientVia(t testing.TB, seeds ...*Server) *redis.ClusterClient {
	addrs := make([]string, len(seeds))
	for i, s := range seeds {
		addrs[i] = s.Addr
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 addrs,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// node returns the Server listening on addr ("127.0.0.1:port"), or nil.
func (c *Cluster) node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// Masters returns the live nodes that currently report role master, in
// start order.
func (c *Cluster) Masters(t testing.TB) []*Server {
	t.Helper()
	var ms []*Server
	for _, s := range c.Nodes {
		if s.Alive() && c.role(t, s) == "master" {
			ms = append(ms, s)
		}
	}
	return ms
}

// ReplicasOf returns the live nodes that currently replicate master.
func (c *Cluster) ReplicasOf(t testing.TB, master *Server) []*Server {
	t.Helper()
	var rs []*Server
	for _, s := range c.Nodes {
		if s.Alive() && s != master && c.role(t, s) == "slave" {
			info := c.info(t, s, "replication")
			if infoField(info, "master_port") == strconv.Itoa(master.Port) {
				rs = append(rs, s)
			}
		}
	}
	return rs
}

// Slot returns the cluster hash slot of key, as the server computes it.
func (c *Cluster) Slot(t testing.TB, key string) int {
	t.Helper()
	s := c.anyAlive(t)
	n, err := c.plain(s).ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q on %s: %v", key, s.Addr, err)
	}
	return int(n)
}

// MasterOf returns the master that serves key's slot, according to a live
// node's view of the slot map.
func (c *Cluster) MasterOf(t testing.TB, key string) *Server {
	t.Helper()
	slot := c.Slot(t, key)
	s := c.anyAlive(t)
	slots, err := c.plain(s).ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER SLOTS on %s: %v", s.Addr, err)
	}
	for _, r := range slots {
		if slot >= int(r.Start) && slot <= int(r.End) && len(r.Nodes) > 0 {
			if m := c.node(r.Nodes[0].Addr); m != nil {
				return m
			}
		}
	}
	t.Fatalf("redistest: no master serves slot %d", slot)
	return nil
}

// NodeID returns the cluster node id of s.
func (c *Cluster) NodeID(t testing.TB, s *Server) string {
	t.Helper()
	id, err := c.plain(s).ClusterMyID(context.Background()).Result()
	if err != nil {
		t.Fatalf("redistest: CLUSTER MYID on %s: %v", s.Addr, err)
	}
	return id
}

// Failover promotes a replica of master with a coordinated CLUSTER FAILOVER
// (the replica first catches up with the master, so nothing acknowledged to
// a client is lost) and waits until the cluster is stable again. It returns
// the new master.
func (c *Cluster) Failover(t testing.TB, master *Server) *Server {
	t.Helper()
	rs := c.ReplicasOf(t, master)
	if len(rs) == 0 {
		t.Fatalf("redistest: %s has no replica to fail over to", master.Addr)
	}
	r := rs[0]
	// A manual failover that does not complete within 5s (Redis'
	// CLUSTER_MF_TIMEOUT: no majority of votes in time, e.g. on a busy
	// machine) is abandoned by Redis; ask again, as an operator would.
	deadline := time.Now().Add(clusterTimeout)
	for {
		if err := c.plain(r).Do(context.Background(), "CLUSTER", "FAILOVER").Err(); err != nil {
			t.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", r.Addr, err)
		}
		promoted := time.Now().Add(6 * time.Second)
		for c.role(t, r) != "master" && time.Now().Before(promoted) {
			time.Sleep(10 * time.Millisecond) // polling the replica's role
		}
		if c.role(t, r) == "master" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s not promoted by CLUSTER FAILOVER within %v:\n%s", r.Addr, clusterTimeout, r.LogTail())
		}
		t.Logf("redistest: CLUSTER FAILOVER on %s did not complete, retrying:\n%s", r.Addr, r.LogTail())
	}
	c.WaitStable(t)
	return r
}

// MoveSlot migrates slot, with its keys, to the master to, the way
// `redis-cli --cluster reshard` does (SETSLOT IMPORTING/MIGRATING, MIGRATE,
// SETSLOT NODE), and waits until every node agrees.
func (c *Cluster) MoveSlot(t testing.TB, slot int, to *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	from := c.slotOwner(t, slot)
	if from == to {
		return
	}
	fromID, toID := c.NodeID(t, from), c.NodeID(t, to)
	src, dst := c.plain(from), c.plain(to)
	must := func(what string, err error) {
		if err != nil {
			t.Fatalf("redistest: move slot %d %s→%s: %s: %v", slot, from.Addr, to.Addr, what, err)
		}
	}
	must("importing", dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
	must("migrating", src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err())
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		must("getkeysinslot", err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", to.Port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must("migrate", src.Do(ctx, args...).Err())
	}
	// The new owner first, then the old one, then the rest, as redis-cli does.
	must("node (target)", dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
	must("node (source)", src.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
	for _, m := range c.Masters(t) {
		if m != from && m != to {
			must("node (other)", c.plain(m).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err())
		}
	}
	c.waitFor(t, fmt.Sprintf("every node to see slot %d on %s", slot, to.Addr), func() error {
		for _, s := range c.Nodes {
			if !s.Alive() {
				continue
			}
			if owner := c.slotOwnerSeenBy(t, s, slot); owner != to.Addr {
				return fmt.Errorf("%s sees slot %d on %s", s.Addr, slot, owner)
			}
		}
		return nil
	})
}

// WaitStable waits until every live node reports cluster_state:ok with all
// slots served, knows every live node, agrees on the slot map, and every
// replica's link to its master is up.
func (c *Cluster) WaitStable(t testing.TB) {
	t.Helper()
	c.waitFor(t, "the cluster to be stable", func() error {
		var view string
		for _, s := range c.Nodes {
			if !s.Alive() {
				continue
			}
			info, err := c.plain(s).ClusterInfo(context.Background()).Result()
			if err != nil {
				return fmt.Errorf("%s: CLUSTER INFO: %w", s.Addr, err)
			}
			if infoField(info, "cluster_state") != "ok" || infoField(info, "cluster_slots_ok") != "16384" {
				return fmt.Errorf("%s: state %s, slots ok %s", s.Addr, infoField(info, "cluster_state"), infoField(info, "cluster_slots_ok"))
			}
			if n, _ := strconv.Atoi(infoField(info, "cluster_known_nodes")); n < len(c.Nodes) {
				return fmt.Errorf("%s knows %d of %d nodes", s.Addr, n, len(c.Nodes))
			}
			roles, err := c.linksUp(s)
			if err != nil {
				return err
			}
			v := c.slotView(t, s) + "\n" + roles
			if view == "" {
				view = v
			} else if v != view {
				return fmt.Errorf("views of slots and roles differ:\n%s\n%s", view, v)
			}
			repl := c.info(t, s, "replication")
			if infoField(repl, "role") == "slave" && infoField(repl, "master_link_status") != "up" {
				return fmt.Errorf("%s: replica link %s", s.Addr, infoField(repl, "master_link_status"))
			}
		}
		return nil
	})
}

// linksUp checks that s has a connected cluster-bus link to every other
// node and flags none of them as failing or still in handshake, and returns
// how s sees every node's role and master. Every node must agree on that
// before a manual failover: a master ignores a failover request from a node
// it does not yet know as its replica, and the request times out.
func (c *Cluster) linksUp(s *Server) (string, error) {
	nodes, err := c.plain(s).ClusterNodes(context.Background()).Result()
	if err != nil {
		return "", fmt.Errorf("%s: CLUSTER NODES: %w", s.Addr, err)
	}
	var roles []string
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return "", fmt.Errorf("%s: bad CLUSTER NODES line %q", s.Addr, line)
		}
		for _, bad := range []string{"handshake", "fail", "noaddr"} {
			if strings.Contains(f[2], bad) {
				return "", fmt.Errorf("%s sees %s as %s", s.Addr, f[1], f[2])
			}
		}
		if f[7] != "connected" {
			return "", fmt.Errorf("%s: link to %s %s", s.Addr, f[1], f[7])
		}
		role := "master"
		if strings.Contains(f[2], "slave") {
			role = "replica of " + f[3]
		}
		roles = append(roles, f[0]+" "+role)
	}
	sort.Strings(roles)
	return strings.Join(roles, "\n"), nil
}

// slotView is a canonical text of the slot ranges and masters that s sees.
func (c *Cluster) slotView(t testing.TB, s *Server) string {
	slots, err := c.plain(s).ClusterSlots(context.Background()).Result()
	if err != nil {
		return "error: " + err.Error()
	}
	lines := make([]string, 0, len(slots))
	for _, r := range slots {
		m := "?"
		if len(r.Nodes) > 0 {
			m = r.Nodes[0].Addr
		}
		lines = append(lines, fmt.Sprintf("%05d-%05d %s", r.Start, r.End, m))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func (c *Cluster) slotOwner(t testing.TB, slot int) *Server {
	t.Helper()
	addr := c.slotOwnerSeenBy(t, c.anyAlive(t), slot)
	s := c.node(addr)
	if s == nil {
		t.Fatalf("redistest: slot %d served by unknown node %q", slot, addr)
	}
	return s
}

func (c *Cluster) slotOwnerSeenBy(t testing.TB, s *Server, slot int) string {
	slots, err := c.plain(s).ClusterSlots(context.Background()).Result()
	if err != nil {
		return "error: " + err.Error()
	}
	for _, r := range slots {
		if slot >= int(r.Start) && slot <= int(r.End) && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr
		}
	}
	return "none"
}

func (c *Cluster) anyAlive(t testing.TB) *Server {
	t.Helper()
	for _, s := range c.Nodes {
		if s.Alive() {
			return s
		}
	}
	t.Fatalf("redistest: no cluster node alive")
	return nil
}

func (c *Cluster) role(t testing.TB, s *Server) string {
	return infoField(c.info(t, s, "replication"), "role")
}

func (c *Cluster) info(t testing.TB, s *Server, section string) string {
	t.Helper()
	info, err := c.plain(s).Info(context.Background(), section).Result()
	if err != nil {
		t.Fatalf("redistest: INFO on %s: %v", s.Addr, err)
	}
	return info
}

// plain returns the harness' admin client for s.
func (c *Cluster) plain(s *Server) *redis.Client {
	return c.admin.get(s)
}

// waitFor polls check until it returns nil, failing the test after
// clusterTimeout with the last reason.
func (c *Cluster) waitFor(t testing.TB, what string, check func() error) {
	t.Helper()
	waitFor(t, what, clusterTimeout, check)
}

// waitFor polls check until it returns nil or within passes.
func waitFor(t testing.TB, what string, within time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: waited %v for %s: %v", within, what, err)
		}
		time.Sleep(10 * time.Millisecond) // polling processes we do not control
	}
}

// infoField returns the value of field in INFO or CLUSTER INFO text.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
