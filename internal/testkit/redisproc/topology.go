package redisproc

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// nodeLine is one line of CLUSTER NODES: one node as the node asked sees it.
type nodeLine struct {
	id     string
	addr   string // "127.0.0.1:<port>", without the bus port and hostname
	flags  []string
	master string   // the primary's id for a replica, "-" for a primary
	epoch  string   // config epoch
	link   string   // "connected" or "disconnected"
	slots  []string // ranges ("0-5460") and single slots, without migration markers
}

func (n nodeLine) hasFlag(f string) bool { return slices.Contains(n.flags, f) }

func (n nodeLine) primary() bool { return n.hasFlag("master") }

// serves reports whether the node serves slot.
func (n nodeLine) serves(slot int) bool {
	for _, r := range n.slots {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 == nil && err2 == nil && a <= slot && slot <= b {
			return true
		}
	}
	return false
}

// parseNodes parses a CLUSTER NODES reply. Each line reads:
// id addr flags master ping-sent pong-recv config-epoch link-state slot...
func parseNodes(text string) ([]nodeLine, error) {
	var nodes []nodeLine
	for line := range strings.Lines(strings.TrimSpace(text)) {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("short CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addr, _, _ = strings.Cut(addr, ",")
		n := nodeLine{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3], epoch: f[6], link: f[7]}
		for _, s := range f[8:] {
			if !strings.HasPrefix(s, "[") { // "[slot->-id]" and "[slot-<-id]" mark migrations
				n.slots = append(n.slots, s)
			}
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// shardsSplit returns why the server's view of the shards is not settled, or "": a shard
// (a primary and its replicas, grouped by shard id) with no primary or with two, as CLUSTER
// SHARDS shows while a replica's shard id still differs from its primary's. A node killed
// then cannot start again: it finds its nodes.conf corrupted (redis/redis#13468,
// valkey-io/valkey#774; seen with Redis 7.4.1 here), so WaitOK waits until the ids agree. A
// server without the command (before Redis 7.0) has no shard ids: "".
func (s *Server) shardsSplit(ctx context.Context) string {
	s.mu.Lock()
	admin := s.admin
	s.mu.Unlock()
	if admin == nil {
		return fmt.Sprintf("server %s is not running", s.Addr())
	}
	shards, err := admin.ClusterShards(ctx).Result()
	if err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "unknown subcommand") {
			return ""
		}
		return fmt.Sprintf("CLUSTER SHARDS on %s: %v", s.Addr(), err)
	}
	for _, sh := range shards {
		primaries, ids := 0, make([]string, 0, len(sh.Nodes))
		for _, n := range sh.Nodes {
			ids = append(ids, n.ID)
			if n.Role == "master" {
				primaries++
			}
		}
		if primaries != 1 {
			return fmt.Sprintf("node %s sees a shard of %d primaries (nodes %v): the shard ids have not settled", s.Addr(), primaries, ids)
		}
	}
	return ""
}

// clusterNodes runs CLUSTER NODES on the server and parses the reply.
func (s *Server) clusterNodes(ctx context.Context) ([]nodeLine, error) {
	text, err := s.Do(ctx, "CLUSTER", "NODES").Text()
	if err != nil {
		return nil, err
	}
	return parseNodes(text)
}

// topologyKey describes who is primary, of which slots, and whose replica each replica is,
// in a form that two nodes with the same view share.
func topologyKey(nodes []nodeLine) string {
	parts := make([]string, 0, len(nodes))
	for _, n := range nodes {
		if n.primary() {
			parts = append(parts, n.addr+" primary "+strings.Join(n.slots, ","))
		} else {
			parts = append(parts, n.addr+" replica-of "+n.master)
		}
	}
	slices.Sort(parts)
	return "[" + strings.Join(parts, "; ") + "]"
}

// id returns node's cluster node id (CLUSTER MYID), failing the test on error.
func (c *Cluster) id(node *Server) string {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	id, err := node.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		c.tb.Fatalf("redisproc: CLUSTER MYID on %s: %v\n%s", node.Addr(), err, node.LogTail())
	}
	return id
}

// view returns the topology as the first node that answers CLUSTER NODES sees it, failing
// the test when none answers.
func (c *Cluster) view() []nodeLine {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var lastErr error
	for _, node := range c.AllNodes() {
		nodes, err := node.clusterNodes(ctx)
		if err == nil {
			return nodes
		}
		lastErr = err
	}
	c.tb.Fatalf("redisproc: no node answered CLUSTER NODES: %v", lastErr)
	return nil
}

// Primaries returns the nodes that are primaries now and serve slots, as CLUSTER NODES on
// the first node that answers reports them, in the order of their lowest slot. It fails
// the test when no node answers.
func (c *Cluster) Primaries() []*Server {
	c.tb.Helper()
	type primary struct {
		node  *Server
		first int
	}
	var ps []primary
	for _, n := range c.view() {
		node := c.byAddr(n.addr)
		if !n.primary() || len(n.slots) == 0 || node == nil {
			continue
		}
		first := slotCount
		for s := range slotCount {
			if n.serves(s) {
				first = s
				break
			}
		}
		ps = append(ps, primary{node, first})
	}
	slices.SortFunc(ps, func(a, b primary) int { return a.first - b.first })
	nodes := make([]*Server, len(ps))
	for i, p := range ps {
		nodes[i] = p.node
	}
	return nodes
}

// ReplicasOf returns the nodes that replicate primary now, as CLUSTER NODES on the first
// node that answers reports them, in the order of AllNodes. It fails the test when no node
// answers.
func (c *Cluster) ReplicasOf(primary *Server) []*Server {
	c.tb.Helper()
	id := c.id(primary)
	replicas := map[string]bool{}
	for _, n := range c.view() {
		if n.master == id {
			replicas[n.addr] = true
		}
	}
	var nodes []*Server
	for _, node := range c.AllNodes() {
		if replicas[node.Addr()] {
			nodes = append(nodes, node)
		}
	}
	return nodes
}

// mfRetry is how long Failover waits for a promotion before asking again: a replica gives
// up a manual failover after 5 s (CLUSTER_MF_TIMEOUT).
const mfRetry = 6 * time.Second

// Failover promotes replica to primary with CLUSTER FAILOVER run on it: a manual failover
// that its primary coordinates. The primary stops its clients, the replica catches up
// with it, then takes over its slots, so no write the primary acknowledged is lost, and
// the old primary becomes a replica of the new one. Failover waits until every node sees
// replica as a primary serving those slots and the old primary as its replica, and the
// cluster is healthy (see WaitOK; this includes the old primary synced to the new one).
// It asks again when no promotion came within the time a replica gives a manual failover.
// On timeout it fails the test with the nodes' logs.
func (c *Cluster) Failover(replica *Server) {
	c.tb.Helper()
	deadline := time.Now().Add(c.timeout)
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	id := c.id(replica)
	old := ""
	nodes, err := replica.clusterNodes(ctx)
	if err != nil {
		c.fatalf("redisproc: CLUSTER NODES on %s: %v", replica.Addr(), err)
	}
	var slots []string
	for _, n := range nodes {
		if n.id == id {
			old = n.master
		}
	}
	for _, n := range nodes {
		if n.id == old {
			slots = n.slots
		}
	}
	if old == "" || old == "-" || len(slots) == 0 {
		c.fatalf("redisproc: failover to %s: it is not a replica of a primary that serves slots", replica.Addr())
	}
	c.do(ctx, replica, "CLUSTER", "FAILOVER")
	asked := time.Now()
	err = waitFor(deadline, nil, func() (bool, string) {
		if time.Since(asked) > mfRetry {
			if r, err := replica.info(remaining(deadline), "replication"); err == nil && r["role"] == "slave" {
				_ = replica.Do(ctx, "CLUSTER", "FAILOVER").Err() // a failure shows at the deadline
			}
			asked = time.Now()
		}
		for _, node := range c.AllNodes() {
			nodes, err := node.clusterNodes(ctx)
			if err != nil {
				return false, fmt.Sprintf("CLUSTER NODES on %s: %v", node.Addr(), err)
			}
			for _, n := range nodes {
				switch {
				case n.id == id && (!n.primary() || !slices.Equal(n.slots, slots)):
					return false, fmt.Sprintf("node %s sees %s as %s with slots %v, want a primary with %v", node.Addr(), replica.Addr(), strings.Join(n.flags, ","), n.slots, slots)
				case n.id == old && n.master != id:
					return false, fmt.Sprintf("node %s sees the old primary %s as %s of %s, want a replica of %s", node.Addr(), n.addr, strings.Join(n.flags, ","), n.master, id)
				}
			}
		}
		return c.healthy(deadline)
	})
	if err != nil {
		c.fatalf("redisproc: failover to %s: %v", replica.Addr(), err)
	}
}

// CrashPrimary kills primary with SIGKILL, as a crash, and waits until the cluster fails
// over on its own: after cluster-node-timeout (2 s) the others mark it failed and one of its
// replicas wins an election and takes over its slots. CrashPrimary waits until every other
// node sees that replica as the primary of those slots and reports cluster_state:ok, then
// starts the old primary again, which rejoins as a replica of the new one, and waits until
// the cluster is healthy (WaitOK). It returns the promoted replica and how long the slots had
// no primary that answered (from the kill to the first node seeing the replica in charge).
// On timeout it fails the test with the nodes' logs.
func (c *Cluster) CrashPrimary(primary *Server) (*Server, time.Duration) {
	c.tb.Helper()
	deadline := time.Now().Add(c.timeout)
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	id := c.id(primary)
	var slots []string
	for _, n := range c.view() {
		if n.id == id {
			slots = n.slots
		}
	}
	candidates := map[string]*Server{}
	for _, r := range c.ReplicasOf(primary) {
		candidates[c.id(r)] = r
	}
	if len(slots) == 0 || len(candidates) == 0 {
		c.fatalf("redisproc: crash %s: it is not a primary with slots and a replica", primary.Addr())
	}
	killed := time.Now()
	primary.Kill()
	var promoted *Server
	var took time.Duration
	err := waitFor(deadline, nil, func() (bool, string) {
		promoted = nil
		for _, node := range c.AllNodes() {
			if node == primary {
				continue
			}
			if text, err := node.Do(ctx, "CLUSTER", "INFO").Text(); err != nil || parseFields(text)["cluster_state"] != "ok" {
				return false, fmt.Sprintf("node %s: cluster_state %q (%v)", node.Addr(), parseFields(text)["cluster_state"], err)
			}
			nodes, err := node.clusterNodes(ctx)
			if err != nil {
				return false, fmt.Sprintf("CLUSTER NODES on %s: %v", node.Addr(), err)
			}
			var owner *Server
			for _, n := range nodes {
				if r := candidates[n.id]; r != nil && n.primary() && slices.Equal(n.slots, slots) {
					owner = r
				}
			}
			switch {
			case owner == nil:
				return false, fmt.Sprintf("node %s sees no replica of %s serving %v yet", node.Addr(), primary.Addr(), slots)
			case took == 0:
				took = time.Since(killed)
			}
			if promoted != nil && owner != promoted {
				return false, fmt.Sprintf("nodes disagree on the new primary: %s and %s", promoted.Addr(), owner.Addr())
			}
			promoted = owner
		}
		return true, ""
	})
	if err != nil {
		c.fatalf("redisproc: failover after crashing %s: %v", primary.Addr(), err)
	}
	primary.Restart()
	c.WaitOK()
	return promoted, took
}
