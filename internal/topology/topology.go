// Package topology tells what a go-redis client stands for: one server, a Cluster or a Ring.
// It is the one place in the module that looks at a client's type; package fencing computes
// a Topology once, in fencing.New, and every path that depends on it consults that value, as
// does servercheck.
package topology

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A Kind is what a client stands for.
type Kind uint8

// The kinds of client.
const (
	// Server is one server (or one primary, for a failover client): every key on one node,
	// pub/sub on one connection, a multi-key script over any keys. A client of any type
	// other than *redis.ClusterClient and *redis.Ring, such as a type that wraps a
	// *redis.Client, counts as one server: the one documented default.
	Server Kind = iota
	// Cluster is a *redis.ClusterClient (also from redis.NewFailoverClusterClient): keys
	// spread over slots, sharded pub/sub per primary, a multi-key script within one slot.
	Cluster
	// Ring is a *redis.Ring: keys spread over independent servers by the client, no
	// announcement of grants (waiters poll), one resource per script.
	Ring
)

// A Topology is what one client stands for. The zero value is one server without a client.
type Topology struct {
	Kind    Kind
	client  redis.UniversalClient
	cluster *redis.ClusterClient
	ring    *redis.Ring
}

// Of returns the topology of c.
func Of(c redis.UniversalClient) Topology {
	t := Topology{client: c}
	switch c := c.(type) {
	case *redis.ClusterClient:
		t.Kind, t.cluster = Cluster, c
	case *redis.Ring:
		t.Kind, t.ring = Ring, c
	}
	return t
}

// Publish returns how the scripts announce grants to waiters on this topology: "P" (PUBLISH)
// on one server, "S" (SPUBLISH) on a Cluster, "-" (nothing: waiters poll) on a Ring, whose
// client cannot subscribe to a channel on the node that owns a key.
func (t Topology) Publish() string {
	switch t.Kind {
	case Cluster:
		return "S"
	case Ring:
		return "-"
	}
	return "P"
}

// Slot returns the Cluster hash slot of key on a Cluster, and 0 otherwise.
func (t Topology) Slot(key string) uint16 {
	if t.Kind != Cluster {
		return 0
	}
	return Slot(key)
}

// OneScript reports whether one script may take keys of different hash tags that share a
// slot (see Slot): on one server and on a Cluster, not on a Ring.
func (t Topology) OneScript() bool { return t.Kind != Ring }

// Primary returns the node that owns key, to send a script and a WAIT on one connection: the
// client itself for one server, the slot's primary on a Cluster. A Ring has none that the
// caller may address: an error.
func (t Topology) Primary(ctx context.Context, key string) (redis.Cmdable, error) {
	switch t.Kind {
	case Cluster:
		return t.cluster.MasterForKey(ctx, key)
	case Ring:
		return nil, errRing
	}
	return t.client, nil
}

var errRing = errors.New("a Ring has no node to address")

// ClusterClient returns the client of a Cluster, or nil.
func (t Topology) ClusterClient() *redis.ClusterClient { return t.cluster }

// Refresh reloads a Cluster client's slot map at once (ForEachMaster reloads it before it
// calls anything; ReloadState only schedules a reload), after a MOVED the client did not see
// (one inside a pipeline of ours). It does nothing on other topologies.
func (t Topology) Refresh(ctx context.Context) {
	if t.cluster != nil {
		_ = t.cluster.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
	}
}

// EachServer calls fn for every server behind the client, concurrently on a Cluster and a
// Ring: the client itself for one server (addr is "" when the client is not a *redis.Client),
// every primary of a Cluster, every shard of a Ring. It returns the first error of fn or of
// the client.
func (t Topology) EachServer(ctx context.Context, fn func(ctx context.Context, c redis.Cmdable, addr string) error) error {
	each := func(ctx context.Context, n *redis.Client) error { return fn(ctx, n, n.Options().Addr) }
	switch t.Kind {
	case Cluster:
		return t.cluster.ForEachMaster(ctx, each)
	case Ring:
		return t.ring.ForEachShard(ctx, each)
	}
	if c, ok := t.client.(*redis.Client); ok {
		return each(ctx, c)
	}
	return fn(ctx, t.client, "")
}

// Slot returns the Redis Cluster hash slot of key (HASH_SLOT): CRC16 (XMODEM) of its hash
// tag, or of the whole key when it has no non-empty {…} section, modulo 16384.
func Slot(key string) uint16 {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
