package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/scan"
	"github.com/fencekit/fencekit/internal/wire"
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

// classifier tells the kind of a key under a prefix by the names package wire gives a
// resource's keys.
type classifier struct {
	prefix string
	lock   string // the last part of a lock key's name, after the resource's base
}

func newClassifier(prefix string) classifier {
	k := wire.For("", "r")
	return classifier{prefix: prefix, lock: strings.TrimPrefix(k.Lock, k.Base())}
}

// kindOf returns the kind of key. Every key of a resource starts with the resource's base
// (wire.Keys.Base), which ends with a ':' after the hash tag: each such ':' is tried as the
// end of a base, whose lock key names the resource (wire.ResourceOf), until the key is one
// of that resource's names.
func (cl classifier) kindOf(key string) int {
	rest, ok := strings.CutPrefix(key, cl.prefix)
	if !ok {
		return kindOther
	}
	tag := strings.IndexByte(rest, '}') // the prefix has no braces: the hash tag's end
	if tag < 0 {
		return kindOther
	}
	for i := len(cl.prefix) + tag + 1; i < len(key); i++ {
		if key[i] != ':' {
			continue
		}
		base := key[:i+1]
		name, ok := wire.ResourceOf(cl.prefix, base+cl.lock)
		if !ok {
			continue
		}
		k := wire.For(cl.prefix, name)
		if k.Base() != base {
			continue
		}
		if kind := kindIn(k, key); kind != kindOther {
			return kind
		}
	}
	return kindOther
}

// kindIn returns the kind of key among the names of the resource of k.
func kindIn(k wire.Keys, key string) int {
	waiters, records := k.Waiter(""), k.Record("")
	switch {
	case key == k.Lock:
		return kindLock
	case key == k.Fence:
		return kindFence
	case key == k.Queue:
		return kindQueue
	case key == k.Memo(echofence.RecordName):
		return kindIdem
	case len(key) > len(waiters) && strings.HasPrefix(key, waiters):
		return kindWaiter
	case len(key) > len(records) && strings.HasPrefix(key, records):
		return kindRecord
	}
	return kindOther
}

// pttlMs returns a PTTL reply in milliseconds: -1 for no expiry, -2 for no key.
func pttlMs(cmd *redis.DurationCmd) int64 {
	d, err := cmd.Result()
	if err != nil {
		return -2
	}
	if d < 0 {
		return int64(d) // go-redis keeps -1 and -2 as they are
	}
	return d.Milliseconds()
}

func (c *cli) collectStats(ctx context.Context, client redis.UniversalClient, prefix string, sample, count int64) (statsOutput, error) {
	out := statsOutput{Prefix: prefix, Kinds: make([]kindStats, len(keyKinds))}
	for i, k := range keyKinds {
		out.Kinds[i].Kind = k.id
	}
	prog := c.newProgress("keys")
	cl := newClassifier(prefix)
	var mu sync.Mutex
	err := scan.Each(ctx, client, func(ctx context.Context, node *redis.Client) error {
		if n, err := node.DBSize(ctx).Result(); err == nil {
			prog.addTotal(n)
		}
		return scan.Keys(ctx, node, scan.EscapeGlob(prefix)+"*", count, func(keys []string) error {
			prog.add(len(keys))
			if len(keys) == 0 {
				return nil
			}
			kinds := make([]int, len(keys))
			sampled := make([]bool, len(keys))
			mu.Lock()
			for i, key := range keys {
				kinds[i] = cl.kindOf(key)
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
