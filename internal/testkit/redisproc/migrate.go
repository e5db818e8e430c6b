package redisproc

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// migrateBatch is how many keys one MIGRATE moves.
const migrateBatch = 100

// MigrateSlot moves hash slot and its keys from the primary that serves it to the primary
// to, as `redis-cli --cluster reshard` does: CLUSTER SETSLOT IMPORTING on to, MIGRATING on
// the source, MIGRATE of the slot's keys (with their TTLs) in batches, then SETSLOT NODE on
// to, on the source and on every other primary, one right after the other. It then waits
// until every node, replicas included, sees to serving the slot. Between the first and the
// last step, commands on the slot's keys may get ASK or TRYAGAIN replies; the source drops
// the slot's shard channel subscriptions when it gives the slot up. Moving a slot to the
// primary that serves it does nothing. Leave every primary at least one slot: WaitOK expects
// each to serve some. On failure it fails the test with the nodes' logs.
func (c *Cluster) MigrateSlot(slot int, to *Server) {
	c.tb.Helper()
	if slot < 0 || slot >= slotCount {
		c.tb.Fatalf("redisproc: slot %d out of range", slot)
	}
	from := c.SlotOwner(slot)
	if from == to {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.settleEpochs(ctx)
	fromID, toID := c.id(from), c.id(to)
	s := strconv.Itoa(slot)
	c.do(ctx, to, "CLUSTER", "SETSLOT", s, "IMPORTING", fromID)
	c.do(ctx, from, "CLUSTER", "SETSLOT", s, "MIGRATING", toID)
	for {
		keys, err := from.Do(ctx, "CLUSTER", "GETKEYSINSLOT", s, migrateBatch).StringSlice()
		if err != nil {
			c.fatalf("redisproc: CLUSTER GETKEYSINSLOT %d on %s: %v", slot, from.Addr(), err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", strconv.Itoa(to.Port()), "", 0, c.timeout.Milliseconds(), "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		c.do(ctx, from, args...)
	}
	// The target first, so that the slot is never left without an owner that accepts it.
	c.do(ctx, to, "CLUSTER", "SETSLOT", s, "NODE", toID)
	c.do(ctx, from, "CLUSTER", "SETSLOT", s, "NODE", toID)
	for _, node := range c.Primaries() {
		if node != to && node != from {
			c.do(ctx, node, "CLUSTER", "SETSLOT", s, "NODE", toID)
		}
	}
	// SETSLOT NODE bumps the target's config epoch without consensus, so two migrations in a
	// row can leave two primaries with one epoch. Redis resolves such a collision by bumping
	// one of them, and until then the slot's owner may be seen differently, or even change
	// back; so wait until every node sees distinct epochs and the slot on to, and give the
	// slot to to again if it went back.
	deadline := time.Now().Add(c.timeout)
	err := waitFor(deadline, nil, func() (bool, string) {
		for _, node := range c.AllNodes() {
			nodes, err := node.clusterNodes(ctx)
			if err != nil {
				return false, fmt.Sprintf("CLUSTER NODES on %s: %v", node.Addr(), err)
			}
			epochs := map[string]bool{}
			for _, n := range nodes {
				if !n.primary() {
					continue
				}
				if epochs[n.epoch] {
					return false, fmt.Sprintf("node %s sees two primaries with config epoch %s", node.Addr(), n.epoch)
				}
				epochs[n.epoch] = true
			}
			slots, err := node.clusterSlots(ctx)
			if err != nil {
				return false, fmt.Sprintf("CLUSTER SLOTS on %s: %v", node.Addr(), err)
			}
			if owner := slotOwner(slots, slot); owner != to.Addr() {
				if owner != "" && owner != to.Addr() && node.primaryOf(ctx, slot) {
					_ = to.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", toID).Err()
					_ = node.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", toID).Err()
				}
				return false, fmt.Sprintf("node %s sees slot %d served by %q", node.Addr(), slot, owner)
			}
		}
		return true, ""
	})
	if err != nil {
		c.fatalf("redisproc: migrate slot %d from %s to %s: %v", slot, from.Addr(), to.Addr(), err)
	}
}

// settleEpochs waits until every node knows the same current epoch: a SETSLOT NODE bumps the
// target's config epoch to one above the highest it knows, so a migration that starts before
// the last one's bump has spread can give two primaries the same epoch.
func (c *Cluster) settleEpochs(ctx context.Context) {
	c.tb.Helper()
	err := waitFor(time.Now().Add(c.timeout), nil, func() (bool, string) {
		var first string
		for _, node := range c.AllNodes() {
			text, err := node.Do(ctx, "CLUSTER", "INFO").Text()
			if err != nil {
				return false, fmt.Sprintf("CLUSTER INFO on %s: %v", node.Addr(), err)
			}
			epoch := parseFields(text)["cluster_current_epoch"]
			if first == "" {
				first = epoch
			} else if epoch != first {
				return false, fmt.Sprintf("node %s is at epoch %s, another at %s", node.Addr(), epoch, first)
			}
		}
		return true, ""
	})
	if err != nil {
		c.fatalf("redisproc: %v", err)
	}
}

// primaryOf reports whether the server, as it sees itself, is the primary that serves slot.
func (s *Server) primaryOf(ctx context.Context, slot int) bool {
	nodes, err := s.clusterNodes(ctx)
	if err != nil {
		return false
	}
	for _, n := range nodes {
		if n.hasFlag("myself") {
			return n.primary() && n.serves(slot)
		}
	}
	return false
}

// MigrateKey moves the hash slot of key, and with it every key that shares its hash tag,
// to the primary to, as MigrateSlot does.
func (c *Cluster) MigrateKey(key string, to *Server) {
	c.tb.Helper()
	c.MigrateSlot(c.Slot(key), to)
}
