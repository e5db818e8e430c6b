package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

const statsHelp = `Counts the keys under the prefix by kind (locks, fence counters, queues, waiter keys,
release records, the Echo idempotency middleware's records, and keys that do not follow the
layout), with and without an expiry, and estimates their memory
from MEMORY USAGE on a sample of each kind (the first --sample keys found), scaled to the
count. A fence counter stays after its lock is released, so counters without an expiry grow
with the number of resources ever locked. One SCAN over every primary with --cluster;
progress on stderr when it takes longer than a second.

Example:
  fencekit stats
  fencekit stats --cluster -u 'redis://10.0.0.1:7000' --sample 200 --json
`

// The kinds stats counts, in the order it prints them: indices into keyKinds.
const (
	kindLock = iota
	kindFence
	kindQueue
	kindWaiter
	kindRecord
	kindIdem
	kindOther
)

// keyKinds names the kinds, in the order of their constants.
var keyKinds = []struct{ id, label string }{
	kindLock:   {"lock", "locks"},
	kindFence:  {"fence", "fence counters"},
	kindQueue:  {"queue", "queues"},
	kindWaiter: {"waiter", "waiter keys"},
	kindRecord: {"record", "release records"},
	kindIdem:   {"idem", "idempotency records"},
	kindOther:  {"other", "other keys"},
}

// kindStats is one kind's line of stats --json.
type kindStats struct {
	Kind        string `json:"kind"`
	Keys        int64  `json:"keys"`
	WithTTL     int64  `json:"with_ttl"`
	WithoutTTL  int64  `json:"without_ttl"`
	Sampled     int64  `json:"sampled"`
	SampleBytes int64  `json:"sample_bytes"`
	// EstimatedBytes is SampleBytes scaled to Keys.
	EstimatedBytes int64 `json:"estimated_bytes"`
}

type statsOutput struct {
	Prefix string      `json:"prefix"`
	Kinds  []kindStats `json:"kinds"`
	Total  kindStats   `json:"total"`
}

func (c *cli) stats(ctx context.Context, args []string) int {
	fs, o := c.newFlags("stats", "[flags]", statsHelp)
	sample := fs.Int64("sample", 1000, "MEMORY USAGE on at most `N` keys of each kind")
	count := fs.Int64("count", defaultScanCount, "COUNT `hint` of each SCAN call")
	pos, code, ok := c.parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(fs, "unexpected argument %q", pos[0])
	}
	if *sample < 0 || *count <= 0 {
		return c.usageError(fs, "--sample must not be negative and --count must be positive")
	}
	client, code, ok := c.connectOrFail(fs, o)
	if !ok {
		return code
	}
	defer client.Close()

	out, err := c.collectStats(ctx, client, o.prefix, *sample, *count)
	if err != nil {
		return c.fail("stats", err)
	}
	if o.json {
		if err := writeJSON(c.stdout, out); err != nil {
			return c.fail("stats", err)
		}
		return exitOK
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "KIND\tKEYS\tWITH TTL\tNO TTL\tMEMORY (EST.)\tSAMPLED")
	for i, k := range append(out.Kinds, out.Total) {
		label := "total"
		if i < len(keyKinds) {
			label = keyKinds[i].label
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\n", label, k.Keys, k.WithTTL, k.WithoutTTL, byteSize(k.EstimatedBytes), k.Sampled)
	}
	if err := tw.Flush(); err != nil {
		return c.fail("stats", err)
	}
	fmt.Fprintf(c.stdout, "\nKeys under %q. Memory is MEMORY USAGE of the sampled keys, scaled to the count.\n", o.prefix)
	return exitOK
}

// kindOf classifies a key under prefix.
func kindOf(prefix, key string) int {
	_, suffix, ok := parseKey(prefix, key)
	switch {
	case !ok:
		return kindOther
	case suffix == suffixLock:
		return kindLock
	case suffix == suffixFence:
		return kindFence
	case suffix == suffixQueue:
		return kindQueue
	case suffix == suffixIdem:
		return kindIdem
	case strings.HasPrefix(suffix, suffixWaiter) && len(suffix) > len(suffixWaiter):
		return kindWaiter
	case strings.HasPrefix(suffix, suffixRecord) && len(suffix) > len(suffixRecord):
		return kindRecord
	}
	return kindOther
}

func (c *cli) collectStats(ctx context.Context, client redis.UniversalClient, prefix string, sample, count int64) (statsOutput, error) {
	out := statsOutput{Prefix: prefix, Kinds: make([]kindStats, len(keyKinds))}
	for i, k := range keyKinds {
		out.Kinds[i].Kind = k.id
	}
	prog := c.newProgress("keys")
	var mu sync.Mutex
	err := forEachNode(ctx, client, func(ctx context.Context, node *redis.Client) error {
		if n, err := node.DBSize(ctx).Result(); err == nil {
			prog.addTotal(n)
		}
		return scanNode(ctx, node, escapeGlob(prefix)+"*", count, func(keys []string) error {
			prog.add(len(keys))
			if len(keys) == 0 {
				return nil
			}
			kinds := make([]int, len(keys))
			sampled := make([]bool, len(keys))
			mu.Lock()
			for i, key := range keys {
				kinds[i] = kindOf(prefix, key)
				if k := &out.Kinds[kinds[i]]; k.Sampled < sample {
					k.Sampled++ // reserved; given back if the key is gone
					sampled[i] = true
				}
			}
			mu.Unlock()
			pipe := node.Pipeline()
			ttls := make([]*redis.DurationCmd, len(keys))
			mems := make([]*redis.IntCmd, len(keys))
			for i, key := range keys {
				ttls[i] = pipe.PTTL(ctx, key)
				if sampled[i] {
					mems[i] = pipe.MemoryUsage(ctx, key)
				}
			}
			if _, err := pipe.Exec(ctx); transportError(err) != nil {
				return fmt.Errorf("read keys on %s: %w", node.Options().Addr, err)
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range keys {
				k := &out.Kinds[kinds[i]]
				ttl := pttlMs(ttls[i])
				var mem int64
				if mems[i] != nil {
					var err error
					if mem, err = mems[i].Result(); err != nil {
						ttl = -2 // gone between the two commands
					}
				}
				if ttl == -2 {
					if sampled[i] {
						k.Sampled--
					}
					continue
				}
				k.Keys++
				if ttl == -1 {
					k.WithoutTTL++
				} else {
					k.WithTTL++
				}
				k.SampleBytes += mem
			}
			return nil
		})
	})
	prog.done()
	out.Total.Kind = "total"
	for i := range out.Kinds {
		k := &out.Kinds[i]
		if k.Sampled > 0 {
			k.EstimatedBytes = k.SampleBytes * k.Keys / k.Sampled
		}
		t := &out.Total
		t.Keys += k.Keys
		t.WithTTL += k.WithTTL
		t.WithoutTTL += k.WithoutTTL
		t.Sampled += k.Sampled
		t.SampleBytes += k.SampleBytes
		t.EstimatedBytes += k.EstimatedBytes
	}
	return out, err
}
