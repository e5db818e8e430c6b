package scan

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Nodes returns the servers that hold client's keys, sorted by address: the client itself
// (a *redis.Client, also one from redis.NewFailoverClient), each primary of a
// *redis.ClusterClient, or each shard of a *redis.Ring. Another type of client is an error,
// as its servers cannot be told.
func Nodes(ctx context.Context, client redis.UniversalClient) ([]*redis.Client, error) {
	var (
		mu    sync.Mutex
		nodes []*redis.Client
	)
	collect := func(_ context.Context, node *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, node)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := client.(type) {
	case *redis.Client:
		nodes = []*redis.Client{c}
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, collect)
	case *redis.Ring:
		err = c.ForEachShard(ctx, collect)
	default:
		err = fmt.Errorf("cannot list the servers of a %T: give a *redis.Client, *redis.ClusterClient or *redis.Ring", client)
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(nodes, func(a, b *redis.Client) int { return cmp.Compare(a.Options().Addr, b.Options().Addr) })
	return nodes, nil
}

// Each calls fn with every server of Nodes, concurrently, and returns the first error. fn
// must be safe for concurrent use.
func Each(ctx context.Context, client redis.UniversalClient, fn func(ctx context.Context, node *redis.Client) error) error {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Ring:
		return c.ForEachShard(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	_, err := Nodes(ctx, client)
	return err
}

// Keys runs a whole SCAN MATCH pattern COUNT count over node and calls batch with the keys
// of each reply, none included (one call per SCAN call). It returns batch's first error, or
// SCAN's, which names the server.
func Keys(ctx context.Context, node *redis.Client, pattern string, count int64, batch func(keys []string) error) error {
	var cursor uint64
	for {
		keys, next, err := node.Scan(ctx, cursor, pattern, count).Result()
		if err != nil {
			return fmt.Errorf("SCAN on %s: %w", node.Options().Addr, err)
		}
		if err := batch(keys); err != nil {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}
