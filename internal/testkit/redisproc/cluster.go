package redisproc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// slotCount is the number of hash slots in a Redis Cluster.
const slotCount = 16384

// Cluster is a Redis Cluster owned by one test: primaries that split the hash slots and,
// with ClusterReplicas, replicas of them. It is safe for concurrent use, but changes of
// its topology (Failover, MigrateSlot, RestartNode) must not overlap.
type Cluster struct {
	tb       testing.TB
	nodes    []*Server   // started as primaries, in the order of their slot ranges
	replicas [][]*Server // replicas[i] were started as replicas of nodes[i]
	timeout  time.Duration
}

// StartCluster starts n redis-server nodes in cluster mode (3 when n <= 0), splits the
// 16384 slots between them in equal ranges, joins them with CLUSTER MEET and waits until
// WaitOK passes. With ClusterReplicas(r) it also starts r more nodes per primary and makes
// them its replicas with CLUSTER REPLICATE. opts apply to every node; ClusterMode is
// implied and ReplicaOf is not allowed. The nodes are killed when t ends. On failure it
// fails t with the nodes' logs.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n <= 0 {
		n = 3
	}
	opts = append(opts[:len(opts):len(opts)], ClusterMode())
	cfg := newConfig(opts)
	c := &Cluster{tb: t, timeout: cfg.timeout}
	for range n {
		c.nodes = append(c.nodes, Start(t, opts...))
	}
	for range n {
		var replicas []*Server
		for range cfg.replicas {
			replicas = append(replicas, Start(t, opts...))
		}
		c.replicas = append(c.replicas, replicas)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	for i, node := range c.nodes {
		lo, hi := i*slotCount/n, (i+1)*slotCount/n-1
		// Distinct config epochs spare the nodes the epoch-collision dance; a node
		// accepts SET-CONFIG-EPOCH only while it knows no other node.
		c.do(ctx, node, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1))
		c.do(ctx, node, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi))
	}
	all := c.AllNodes()
	first := all[0]
	for _, node := range all[1:] {
		c.do(ctx, node, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(first.Port()), strconv.Itoa(first.busPort))
	}
	if cfg.replicas > 0 {
		c.replicate()
	}
	c.WaitOK()
	return c
}

// replicate makes each started replica a replica of its primary. A node accepts CLUSTER
// REPLICATE only once gossip has told it about the primary, so each is retried until then.
func (c *Cluster) replicate() {
	c.tb.Helper()
	deadline := time.Now().Add(c.timeout)
	for i, primary := range c.nodes {
		id := c.id(primary)
		for _, replica := range c.replicas[i] {
			err := waitFor(deadline, nil, func() (bool, string) {
				ctx, cancel := context.WithTimeout(context.Background(), remaining(deadline))
				defer cancel()
				if err := replica.Do(ctx, "CLUSTER", "REPLICATE", id).Err(); err != nil {
					return false, fmt.Sprintf("CLUSTER REPLICATE %s on %s: %v", id, replica.Addr(), err)
				}
				return true, ""
			})
			if err != nil {
				c.fatalf("redisproc: make %s a replica of %s: %v", replica.Addr(), primary.Addr(), err)
			}
		}
	}
}

// do runs one setup command on node and fails the test if it fails.
func (c *Cluster) do(ctx context.Context, node *Server, args ...any) {
	c.tb.Helper()
	if err := node.Do(ctx, args...).Err(); err != nil {
		c.tb.Fatalf("redisproc: %v on %s: %v\n%s", args, node.Addr(), err, node.LogTail())
	}
}

// fatalf fails the test with the message and the tail of every node's log.
func (c *Cluster) fatalf(format string, args ...any) {
	c.tb.Helper()
	var logs strings.Builder
	for _, node := range c.AllNodes() {
		fmt.Fprintf(&logs, "node %s:\n%s", node.Addr(), node.LogTail())
	}
	c.tb.Fatalf(format+"\n%s", append(args, logs.String())...)
}

// Nodes returns the nodes started as primaries, in the order of their slot ranges. After
// Failover one of them may be a replica, and after MigrateSlot the ranges differ; see
// Primaries for the current roles.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// Replicas returns the nodes started as replicas (see ClusterReplicas), those of Nodes()[0]
// first; none without ClusterReplicas. See ReplicasOf for the current roles.
func (c *Cluster) Replicas() []*Server {
	var all []*Server
	for _, replicas := range c.replicas {
		all = append(all, replicas...)
	}
	return all
}

// AllNodes returns every node of the cluster: Nodes, then Replicas.
func (c *Cluster) AllNodes() []*Server {
	return append(c.Nodes(), c.Replicas()...)
}

// Addrs returns the addresses of Nodes, in the same order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, node := range c.nodes {
		addrs[i] = node.Addr()
	}
	return addrs
}

// Client returns a new cluster client seeded with every node, replicas included, closed
// when t ends. Each configure function may change the options first.
func (c *Cluster) Client(t testing.TB, configure ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	addrs := c.Addrs()
	for _, replica := range c.Replicas() {
		addrs = append(addrs, replica.Addr())
	}
	opt := &redis.ClusterOptions{
		Addrs:                    addrs,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	for _, f := range configure {
		f(opt)
	}
	client := redis.NewClusterClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// Slot returns the hash slot of key (CLUSTER KEYSLOT on the first node that answers). It
// fails the test when no node answers.
func (c *Cluster) Slot(key string) int {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var lastErr error
	for _, node := range c.AllNodes() {
		slot, err := node.Do(ctx, "CLUSTER", "KEYSLOT", key).Int()
		if err == nil {
			return slot
		}
		lastErr = err
	}
	c.tb.Fatalf("redisproc: CLUSTER KEYSLOT %q: no node answered: %v", key, lastErr)
	return 0
}

// NodeFor returns the primary that serves key's hash slot, as CLUSTER SLOTS on the first
// running node reports it. It fails the test when no node answers or none serves the slot.
func (c *Cluster) NodeFor(key string) *Server {
	c.tb.Helper()
	return c.SlotOwner(c.Slot(key))
}

// SlotOwner returns the primary that serves slot, as CLUSTER SLOTS on the first running
// node reports it. It fails the test when no node answers or none serves the slot.
func (c *Cluster) SlotOwner(slot int) *Server {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var lastErr error
	for _, node := range c.AllNodes() {
		slots, err := node.clusterSlots(ctx)
		if err != nil {
			lastErr = err
			continue
		}
		if owner := c.byAddr(slotOwner(slots, slot)); owner != nil {
			return owner
		}
		c.tb.Fatalf("redisproc: no node of the cluster serves slot %d", slot)
	}
	c.tb.Fatalf("redisproc: no node answered CLUSTER SLOTS: %v", lastErr)
	return nil
}

// slotOwner returns the address of the primary that serves slot in a CLUSTER SLOTS reply,
// or "".
func slotOwner(slots []redis.ClusterSlot, slot int) string {
	for _, r := range slots {
		if r.Start <= slot && slot <= r.End && len(r.Nodes) > 0 {
			return r.Nodes[0].Addr
		}
	}
	return ""
}

// byAddr returns the node with address addr, or nil.
func (c *Cluster) byAddr(addr string) *Server {
	for _, node := range c.AllNodes() {
		if node.Addr() == addr {
			return node
		}
	}
	return nil
}

// clusterSlots runs CLUSTER SLOTS on the server.
func (s *Server) clusterSlots(ctx context.Context) ([]redis.ClusterSlot, error) {
	s.mu.Lock()
	admin := s.admin
	s.mu.Unlock()
	if admin == nil {
		return nil, fmt.Errorf("server %s is not running", s.Addr())
	}
	return admin.ClusterSlots(ctx).Result()
}

// RestartNode kills node with SIGKILL, as a crash, starts it again on the same port and
// directory, and waits until the cluster is healthy (WaitOK). The node reloads its
// nodes.conf, so it keeps its id, role and slots; with the append-only file on
// (Args("--appendonly", "yes", "--appendfsync", "always") given to StartCluster) it also
// keeps every write it acknowledged. A primary back within the node timeout (2 s) keeps its
// slots: its replicas do not take over. A restarted primary refuses commands with
// CLUSTERDOWN for about 2 s, until it has heard from the others; RestartNode returns after
// that. On failure it fails the test with the nodes' logs.
func (c *Cluster) RestartNode(node *Server) {
	c.tb.Helper()
	node.Kill()
	node.Restart()
	c.WaitOK()
}

// WaitOK waits until every node reports cluster_state:ok with all 16384 slots assigned
// and ok, knows every other node, sees every node connected and not failing, and agrees
// with the others on which node is a primary, which slots it serves and whose replica
// each replica is, and groups each replica in its primary's shard (see shardsSplit); and
// until every replica has an up link to its primary and is done syncing. Use it after
// restarting a node. On timeout it fails the test with the nodes' logs.
func (c *Cluster) WaitOK() {
	c.tb.Helper()
	deadline := time.Now().Add(c.timeout)
	if err := waitFor(deadline, nil, func() (bool, string) { return c.healthy(deadline) }); err != nil {
		c.fatalf("redisproc: wait for cluster %v: %v", c.Addrs(), err)
	}
}

// healthy reports whether the cluster passes WaitOK's checks, and if not, why.
func (c *Cluster) healthy(deadline time.Time) (bool, string) {
	var first string // the first node's view, which every other must match
	for _, node := range c.AllNodes() {
		view, why := c.nodeOK(node, deadline)
		if why != "" {
			return false, why
		}
		if first == "" {
			first = view
		} else if view != first {
			return false, fmt.Sprintf("nodes disagree on the topology: %s sees %s; %s sees %s", c.nodes[0].Addr(), first, node.Addr(), view)
		}
	}
	return true, ""
}

// nodeOK checks that node sees a healthy cluster of all c's nodes. It returns the node's
// view of the topology, or why it is not healthy.
func (c *Cluster) nodeOK(node *Server, deadline time.Time) (view, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), remaining(deadline))
	defer cancel()
	text, err := node.Do(ctx, "CLUSTER", "INFO").Text()
	if err != nil {
		return "", fmt.Sprintf("CLUSTER INFO on %s: %v", node.Addr(), err)
	}
	info := parseFields(text)
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": strconv.Itoa(slotCount),
		"cluster_slots_ok":       strconv.Itoa(slotCount),
		"cluster_known_nodes":    strconv.Itoa(len(c.AllNodes())),
		"cluster_size":           strconv.Itoa(len(c.nodes)),
	}
	for k, v := range want {
		if info[k] != v {
			return "", fmt.Sprintf("node %s: %s:%s, want %s", node.Addr(), k, info[k], v)
		}
	}
	nodes, err := node.clusterNodes(ctx)
	if err != nil {
		return "", fmt.Sprintf("CLUSTER NODES on %s: %v", node.Addr(), err)
	}
	replica := false
	for _, n := range nodes {
		if n.link != "connected" || n.hasFlag("fail") || n.hasFlag("fail?") || n.hasFlag("handshake") || n.hasFlag("noaddr") {
			return "", fmt.Sprintf("node %s sees %s as %s, %s", node.Addr(), n.addr, strings.Join(n.flags, ","), n.link)
		}
		if !n.primary() && n.master == "-" || n.primary() && len(n.slots) == 0 {
			return "", fmt.Sprintf("node %s sees %s as %s without a primary or slots", node.Addr(), n.addr, strings.Join(n.flags, ","))
		}
		if n.hasFlag("myself") {
			replica = !n.primary()
		}
	}
	if why := node.shardsSplit(ctx); why != "" {
		return "", why
	}
	if replica {
		r, err := node.info(remaining(deadline), "replication")
		if err != nil {
			return "", fmt.Sprintf("INFO replication on %s: %v", node.Addr(), err)
		}
		if r["role"] != "slave" || r["master_link_status"] != "up" || r["master_sync_in_progress"] != "0" {
			return "", fmt.Sprintf("replica %s: role:%s master_link_status:%s master_sync_in_progress:%s",
				node.Addr(), r["role"], r["master_link_status"], r["master_sync_in_progress"])
		}
	}
	return topologyKey(nodes), ""
}
