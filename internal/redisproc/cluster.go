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

// Cluster is a Redis Cluster of primaries without replicas, owned by one test. It is
// safe for concurrent use.
type Cluster struct {
	tb      testing.TB
	nodes   []*Server
	timeout time.Duration
}

// StartCluster starts n redis-server nodes in cluster mode (3 when n <= 0), splits the
// 16384 slots between them in equal ranges, joins them with CLUSTER MEET and waits until
// WaitOK passes. opts apply to every node; ClusterMode is implied and ReplicaOf is not
// allowed. The nodes are killed when t ends. On failure it fails t with the nodes' logs.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n <= 0 {
		n = 3
	}
	opts = append(opts[:len(opts):len(opts)], ClusterMode())
	c := &Cluster{tb: t, timeout: newConfig(opts).timeout}
	for range n {
		c.nodes = append(c.nodes, Start(t, opts...))
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
	first := c.nodes[0]
	for _, node := range c.nodes[1:] {
		c.do(ctx, node, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(first.Port()), strconv.Itoa(first.busPort))
	}
	c.WaitOK()
	return c
}

// do runs one setup command on node and fails the test if it fails.
func (c *Cluster) do(ctx context.Context, node *Server, args ...any) {
	c.tb.Helper()
	if err := node.Do(ctx, args...).Err(); err != nil {
		c.tb.Fatalf("redisproc: %v on %s: %v\n%s", args, node.Addr(), err, node.LogTail())
	}
}

// Nodes returns the cluster's nodes, in the order of their slot ranges.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// Addrs returns the nodes' addresses, in the order of Nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, node := range c.nodes {
		addrs[i] = node.Addr()
	}
	return addrs
}

// Client returns a new cluster client seeded with every node, closed when t ends. Each
// configure function may change the options first.
func (c *Cluster) Client(t testing.TB, configure ...func(*redis.ClusterOptions)) *redis.ClusterClient {
	t.Helper()
	opt := &redis.ClusterOptions{
		Addrs:                    c.Addrs(),
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

// NodeFor returns the node that serves key's hash slot, as CLUSTER SLOTS on the first
// running node reports it. It fails the test when no node answers or none serves the slot.
func (c *Cluster) NodeFor(key string) *Server {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	var lastErr error
	for _, node := range c.nodes {
		slot, err := node.Do(ctx, "CLUSTER", "KEYSLOT", key).Int64()
		if err != nil {
			lastErr = err
			continue
		}
		slots, err := node.clusterSlots(ctx)
		if err != nil {
			lastErr = err
			continue
		}
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
				for _, candidate := range c.nodes {
					if candidate.Addr() == r.Nodes[0].Addr {
						return candidate
					}
				}
			}
		}
		c.tb.Fatalf("redisproc: no node of the cluster serves slot %d of %q", slot, key)
	}
	c.tb.Fatalf("redisproc: no node answered CLUSTER SLOTS: %v", lastErr)
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

// WaitOK waits until every node reports cluster_state:ok with all 16384 slots assigned
// and ok, knows every other node, and sees every node connected and not failing. Use it
// after restarting a node. On timeout it fails the test with the nodes' logs.
func (c *Cluster) WaitOK() {
	c.tb.Helper()
	deadline := time.Now().Add(c.timeout)
	err := waitFor(deadline, nil, func() (bool, string) {
		for _, node := range c.nodes {
			if ok, why := c.nodeOK(node, deadline); !ok {
				return false, why
			}
		}
		return true, ""
	})
	if err != nil {
		var logs strings.Builder
		for _, node := range c.nodes {
			fmt.Fprintf(&logs, "node %s:\n%s", node.Addr(), node.LogTail())
		}
		c.tb.Fatalf("redisproc: wait for cluster %v: %v\n%s", c.Addrs(), err, logs.String())
	}
}

// nodeOK reports whether node sees a healthy cluster of all c's nodes, and if not, why.
func (c *Cluster) nodeOK(node *Server, deadline time.Time) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), remaining(deadline))
	defer cancel()
	text, err := node.Do(ctx, "CLUSTER", "INFO").Text()
	if err != nil {
		return false, fmt.Sprintf("CLUSTER INFO on %s: %v", node.Addr(), err)
	}
	info := parseFields(text)
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": strconv.Itoa(slotCount),
		"cluster_slots_ok":       strconv.Itoa(slotCount),
		"cluster_known_nodes":    strconv.Itoa(len(c.nodes)),
		"cluster_size":           strconv.Itoa(len(c.nodes)),
	}
	for k, v := range want {
		if info[k] != v {
			return false, fmt.Sprintf("node %s: %s:%s, want %s", node.Addr(), k, info[k], v)
		}
	}
	text, err = node.Do(ctx, "CLUSTER", "NODES").Text()
	if err != nil {
		return false, fmt.Sprintf("CLUSTER NODES on %s: %v", node.Addr(), err)
	}
	// Each line: id addr flags master ping-sent pong-recv epoch link-state slots...
	for line := range strings.Lines(strings.TrimSpace(text)) {
		f := strings.Fields(line)
		if len(f) < 8 {
			return false, fmt.Sprintf("node %s: short CLUSTER NODES line %q", node.Addr(), line)
		}
		if f[7] != "connected" || strings.Contains(f[2], "fail") || strings.Contains(f[2], "handshake") || strings.Contains(f[2], "noaddr") {
			return false, fmt.Sprintf("node %s sees %s as %s, %s", node.Addr(), f[1], f[2], f[7])
		}
	}
	return true, ""
}
