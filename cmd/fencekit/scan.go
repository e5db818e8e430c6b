package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultScanCount is the COUNT hint of every SCAN call.
const defaultScanCount = 1000

// forEachNode calls fn with every server that holds keys: the client itself, or each
// primary of a Cluster, concurrently. fn must be safe for concurrent use.
func forEachNode(ctx context.Context, client redis.UniversalClient, fn func(ctx context.Context, node *redis.Client) error) error {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("unsupported client %T", client)
}

// scanNode runs SCAN MATCH pattern COUNT count over node and calls batch with the keys of
// each reply that returned some.
func scanNode(ctx context.Context, node *redis.Client, pattern string, count int64, batch func(keys []string) error) error {
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

// progress reports a scan's progress on stderr: nothing before the scan has run for
// every, then a line at most every interval, and a last line when it ends. It is safe for
// concurrent use.
type progress struct {
	w     io.Writer
	every time.Duration
	what  string // what is counted: "lock keys", "keys"

	mu      sync.Mutex
	start   time.Time
	last    time.Time
	batches int
	found   int
	total   int64 // keys in the databases scanned, from DBSIZE
	printed bool
}

func (c *cli) newProgress(what string) *progress {
	now := time.Now()
	return &progress{w: c.stderr, every: c.progressEvery, what: what, start: now, last: now}
}

// addTotal adds a node's DBSIZE to the keys the scan has to go through.
func (p *progress) addTotal(n int64) {
	p.mu.Lock()
	p.total += n
	p.mu.Unlock()
}

// add records one SCAN reply that brought found matching keys.
func (p *progress) add(found int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.batches++
	p.found += found
	now := time.Now()
	if now.Sub(p.last) < p.every {
		return
	}
	p.last, p.printed = now, true
	fmt.Fprintf(p.w, "fencekit: scanning: %d SCAN calls over %d keys, %d %s found, %s\n",
		p.batches, p.total, p.found, p.what, now.Sub(p.start).Round(100*time.Millisecond))
}

// done prints the last line if any was printed before.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.printed {
		fmt.Fprintf(p.w, "fencekit: scan done: %d SCAN calls, %d %s found, %s\n",
			p.batches, p.found, p.what, time.Since(p.start).Round(100*time.Millisecond))
	}
}

// transportError returns err unless it is a reply from Redis (redis.Nil included): a
// pipeline's Exec returns the first failed command's error, and a key of an unexpected
// type (WRONGTYPE) must not stop a whole scan. The commands' own results say what failed.
func transportError(err error) error {
	var reply redis.Error
	if err == nil || errors.As(err, &reply) {
		return nil
	}
	return err
}
