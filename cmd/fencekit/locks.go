package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const locksHelp = `Lists the locks held: every key P{...}:lock found with SCAN (never KEYS), on every
primary with --cluster. For each: the resource (decoded, also names with braces), its mode
(exclusive, shared or limit n), its token, the lease left (PTTL), the waiters queued (LLEN of
the queue) and how long the oldest live waiter has waited. A shared resource (fencing.Shared)
and a limited one (fencing.WithLimit) have one row per holder, each with its own token and
lease left; a limited resource's name is followed by (holders/limit). Sorted by lease left
(for several holders, the latest), soonest to expire first. Progress is printed on stderr when
the scan takes longer than a second.

--match takes a glob with the rules of Redis's MATCH ('*' also matches '/') and is applied
to the decoded names, so it finds names with braces too.

Example:
  fencekit locks -u redis://localhost:6379/0 --match 'order-*'
  fencekit locks --cluster -u 'redis://10.0.0.1:7000?addr=10.0.0.2:7000' --json
`

// maxQueueRead bounds how many queue entries locks reads to find the oldest live waiter.
const maxQueueRead = 32

// lockInfo is one held lock, as locks --json prints it.
type lockInfo struct {
	Resource string `json:"resource"`
	Key      string `json:"key"`
	// Mode is "exclusive", "shared" (fencing.Shared), "limit" (fencing.WithLimit; Limit is
	// then n), or "unknown" for a hash whose field limit is neither.
	Mode  string `json:"mode"`
	Value string `json:"value"`
	Owner string `json:"owner"`
	Token int64  `json:"token"`
	// TTLMs is the lease left in milliseconds; -1 if the key has no expiry.
	TTLMs int64 `json:"ttl_ms"`
	// Waiters is the length of the queue (0 when there is none).
	Waiters int64 `json:"waiters"`
	// OldestWaitMs is how long the oldest live waiter has waited; null without one.
	OldestWaitMs *int64 `json:"oldest_wait_ms"`
	// Limit is a limited resource's limit, left out otherwise. Holders are the live holders
	// of a shared or limited resource, by token (Token is then the highest, Value and Owner
	// are empty, and TTLMs is the latest lease); left out for an exclusive lock.
	Limit   int          `json:"limit,omitempty"`
	Holders []holderInfo `json:"holders,omitempty"`
}

type locksOutput struct {
	Locks []lockInfo `json:"locks"`
}

func (c *cli) locks(ctx context.Context, args []string) int {
	fs, o := c.newFlags("locks", "[flags]", locksHelp)
	match := fs.String("match", "*", "only resources whose name matches `GLOB`")
	count := fs.Int64("count", defaultScanCount, "COUNT `hint` of each SCAN call")
	pos, code, ok := c.parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(fs, "unexpected argument %q", pos[0])
	}
	if *count <= 0 {
		return c.usageError(fs, "--count must be positive")
	}
	client, code, ok := c.connectOrFail(fs, o)
	if !ok {
		return code
	}
	defer client.Close()

	found, err := c.findLocks(ctx, client, o.prefix, *match, *count)
	if err != nil {
		return c.fail("locks", err)
	}
	slices.SortFunc(found, func(a, b lockInfo) int {
		ta, tb := a.TTLMs, b.TTLMs
		if ta < 0 {
			ta = 1 << 62
		}
		if tb < 0 {
			tb = 1 << 62
		}
		return cmp.Or(cmp.Compare(ta, tb), strings.Compare(a.Resource, b.Resource))
	})
	if o.json {
		if found == nil {
			found = []lockInfo{}
		}
		if err := writeJSON(c.stdout, locksOutput{Locks: found}); err != nil {
			return c.fail("locks", err)
		}
		return exitOK
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "RESOURCE\tMODE\tTOKEN\tLEASE LEFT\tWAITERS\tOLDEST WAIT")
	for _, l := range found {
		wait := "-"
		if l.OldestWaitMs != nil {
			wait = duration(msDuration(*l.OldestWaitMs))
		}
		mode := modeText(l.Mode, l.Limit)
		if l.Mode != modeExclusive {
			// A shared or limited resource: one row per holder; a limited resource's name is
			// followed by holders/limit.
			name := displayName(l.Resource)
			if l.Mode == modeLimit {
				name = fmt.Sprintf("%s (%d/%d)", name, len(l.Holders), l.Limit)
			}
			for _, h := range l.Holders {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", name, mode, h.Token, c.ttl(h.TTLMs), l.Waiters, wait)
			}
			continue
		}
		token := strconv.FormatInt(l.Token, 10)
		if l.Token == 0 {
			token = "? " + strconv.Quote(l.Value)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", displayName(l.Resource), mode, token, c.ttl(l.TTLMs), l.Waiters, wait)
	}
	if err := tw.Flush(); err != nil {
		return c.fail("locks", err)
	}
	fmt.Fprintf(c.stdout, "%d lock(s) held\n", len(found))
	return exitOK
}

// findLocks scans every node for lock keys under prefix whose resource matches match.
func (c *cli) findLocks(ctx context.Context, client redis.UniversalClient, prefix, match string, count int64) ([]lockInfo, error) {
	pattern := escapeGlob(prefix) + "{*:" + suffixLock
	prog := c.newProgress("lock keys")
	var (
		mu  sync.Mutex
		all []lockInfo
	)
	err := forEachNode(ctx, client, func(ctx context.Context, node *redis.Client) error {
		if n, err := node.DBSize(ctx).Result(); err == nil {
			prog.addTotal(n)
		}
		return scanNode(ctx, node, pattern, count, func(keys []string) error {
			var names []string
			for _, key := range keys {
				name, suffix, ok := parseKey(prefix, key)
				if ok && suffix == suffixLock && globMatch(match, name) {
					names = append(names, name)
				}
			}
			prog.add(len(names))
			if len(names) == 0 {
				return nil
			}
			infos, err := c.readLocks(ctx, node, prefix, names)
			if err != nil {
				return err
			}
			mu.Lock()
			all = append(all, infos...)
			mu.Unlock()
			return nil
		})
	})
	prog.done()
	return all, err
}

// readLocks reads the lock, queue and oldest waiter of each resource from node, in two
// pipelines. Locks gone since the scan are left out.
func (c *cli) readLocks(ctx context.Context, node redis.Cmdable, prefix string, names []string) ([]lockInfo, error) {
	type reads struct {
		get   *redis.StringCmd
		hash  *redis.MapStringStringCmd
		pttl  *redis.DurationCmd
		llen  *redis.IntCmd
		head  *redis.StringSliceCmd
		wkeys []*redis.StringCmd
	}
	rs := make([]reads, len(names))
	pipe := node.Pipeline()
	clock := pipe.Time(ctx)
	for i, name := range names {
		k := keysFor(prefix, name)
		rs[i] = reads{
			get:  pipe.Get(ctx, k.lock),
			hash: pipe.HGetAll(ctx, k.lock), // a shared or limited resource's holders (GET fails)
			pttl: pipe.PTTL(ctx, k.lock),
			llen: pipe.LLen(ctx, k.queue),
			head: pipe.LRange(ctx, k.queue, 0, maxQueueRead-1),
		}
	}
	if _, err := pipe.Exec(ctx); transportError(err) != nil {
		return nil, fmt.Errorf("read locks: %w", err)
	}
	pipe = node.Pipeline()
	heads := make([][]string, len(names))
	for i, name := range names {
		heads[i] = rs[i].head.Val()
		k := keysFor(prefix, name)
		for _, id := range heads[i] {
			rs[i].wkeys = append(rs[i].wkeys, pipe.Get(ctx, k.waiter(id)))
		}
	}
	if pipe.Len() > 0 {
		if _, err := pipe.Exec(ctx); transportError(err) != nil {
			return nil, fmt.Errorf("read waiters: %w", err)
		}
	}
	now := c.now().UnixMilli()
	server := serverNow(clock, c.now())
	var out []lockInfo
	for i, name := range names {
		r := rs[i]
		info := lockInfo{
			Resource: name,
			Key:      keysFor(prefix, name).lock,
			TTLMs:    pttlMs(r.pttl),
			Waiters:  r.llen.Val(),
		}
		if value, err := r.get.Result(); err == nil {
			info.Mode, info.Value = modeExclusive, value
			info.Owner, info.Token = parseLockValue(value)
		} else if h, err := r.hash.Result(); err == nil && len(h) > 0 {
			info.Mode, info.Limit, info.Holders = parseHolders(h, server)
			if len(info.Holders) == 0 {
				continue // every lease ended since the scan
			}
			info.Token = info.Holders[len(info.Holders)-1].Token
		} else {
			continue // released since the scan
		}
		for _, w := range r.wkeys {
			if v, err := w.Result(); err == nil {
				if ws, ok := parseWaiter(v); ok {
					age := max(now-ws.sinceMs, 0)
					info.OldestWaitMs = &age
					break
				}
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// parseLockValue splits a lock value "<owner>:<token>" at its last ':', less the mark '+'
// that follows the token while waiters are queued. token is 0 when the value does not end in
// a positive integer.
func parseLockValue(v string) (owner string, token int64) {
	v = strings.TrimSuffix(v, "+")
	i := strings.LastIndexByte(v, ':')
	if i < 0 {
		return v, 0
	}
	t, err := strconv.ParseInt(v[i+1:], 10, 64)
	if err != nil || t <= 0 {
		return v[:i], 0
	}
	return v[:i], t
}

// waiterState is the value of a w:<id> key: "<lease ms>:<floor>:<since unix ms>". Only the
// time its Locker started waiting is used: the lease is the longest of the Locker's grants,
// and the floor is 0 (each queue element carries its own rules).
type waiterState struct {
	sinceMs int64
}

func parseWaiter(v string) (waiterState, bool) {
	parts := strings.Split(v, ":")
	if len(parts) != 3 {
		return waiterState{}, false
	}
	_, err1 := strconv.ParseInt(parts[0], 10, 64)
	since, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || (parts[1] != "0" && parts[1] != "1") {
		return waiterState{}, false
	}
	return waiterState{sinceMs: since}, true
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

// msDuration converts milliseconds to a Duration.
func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
