package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/scan"
	"github.com/fencekit/fencekit/internal/wire"
)

const locksHelp = `Lists the locks held: every lock key under the prefix found with SCAN (never KEYS), on
every primary with --cluster, each read with the Locker's Inspect. For each: the resource
(decoded, also names with braces), its mode (exclusive, shared or limit n), its token, the
holder's label (fencing.WithLabel), the lease left, the waiters queued, how long the oldest
live waiter has waited and the waiters' labels (the first three, in queue order). A shared
resource (fencing.Shared) and a limited one (fencing.WithLimit) have one row per holder, each
with its own token, label and lease left; a limited resource's name is followed by (holders/limit).
A resource nobody holds but with waiters queued (dead ones, or live ones about to be granted
it) has one row of mode free. Sorted by lease left (for several holders, the latest), soonest
to expire first. Progress is printed on stderr when the scan takes longer than a second.

--match takes a glob with the rules of Redis's MATCH ('*' also matches '/') and is applied
to the decoded names, so it finds names with braces too.

Example:
  fencekit locks -u redis://localhost:6379/0 --match 'order-*'
  fencekit locks --cluster -u 'redis://10.0.0.1:7000?addr=10.0.0.2:7000' --json
`

// lockInfo is one held lock, as locks --json prints it.
type lockInfo struct {
	Resource string `json:"resource"`
	Key      string `json:"key"`
	// Mode is "exclusive", "shared" (fencing.Shared), "limit" (fencing.WithLimit; Limit is
	// then n), "unknown" for holders whose kind cannot be read (a hash of an earlier key
	// layout), or "free" for a resource nobody holds with waiters queued.
	Mode string `json:"mode"`
	// Value is the exclusive holder's lock value, "<owner>:<token>"; empty for the others.
	Value string `json:"value"`
	Owner string `json:"owner"`
	// Label is the exclusive holder's label (fencing.WithLabel); "" without one, and for
	// the others (see Holders).
	Label string `json:"label"`
	Token int64  `json:"token"`
	// TTLMs is the lease left in milliseconds; -1 if the lock has no expiry, -2 when free.
	TTLMs int64 `json:"ttl_ms"`
	// Waiters is the number of waiters queued; WaiterLabels are their labels in queue order,
	// "" for a waiter without one (left out without waiters).
	Waiters      int64    `json:"waiters"`
	WaiterLabels []string `json:"waiter_labels,omitempty"`
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
	locker := newLocker(client, o)
	defer locker.Close()

	found, err := c.findLocks(ctx, client, locker, o.prefix, *match, *count)
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
	fmt.Fprintln(tw, "RESOURCE\tMODE\tTOKEN\tLABEL\tLEASE LEFT\tWAITERS\tOLDEST WAIT\tWAITER LABELS")
	held := 0
	for _, l := range found {
		wait := "-"
		if l.OldestWaitMs != nil {
			wait = c.age(*l.OldestWaitMs)
		}
		mode, waiting := modeText(l.Mode, l.Limit), labelsCell(l.WaiterLabels)
		switch l.Mode {
		case modeExclusive:
			held++
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", displayName(l.Resource), mode, l.Token, labelCell(l.Label), c.ttl(l.TTLMs), l.Waiters, wait, waiting)
		case modeFree:
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t%d\t%s\t%s\n", displayName(l.Resource), mode, l.Waiters, wait, waiting)
		default:
			// A shared or limited resource: one row per holder; a limited resource's name is
			// followed by holders/limit.
			held++
			name := displayName(l.Resource)
			if l.Mode == modeLimit {
				name = fmt.Sprintf("%s (%d/%d)", name, len(l.Holders), l.Limit)
			}
			for _, h := range l.Holders {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", name, mode, h.Token, labelCell(h.Label), c.ttl(h.TTLMs), l.Waiters, wait, waiting)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return c.fail("locks", err)
	}
	if free := len(found) - held; free > 0 {
		fmt.Fprintf(c.stdout, "%d lock(s) held; %s free with waiters queued\n", held, plural(free, "resource"))
	} else {
		fmt.Fprintf(c.stdout, "%d lock(s) held\n", held)
	}
	return exitOK
}

// findLocks scans every node for lock keys under prefix whose resource matches match, and
// reads each resource with locker.
func (c *cli) findLocks(ctx context.Context, client redis.UniversalClient, locker *fencing.Locker, prefix, match string, count int64) ([]lockInfo, error) {
	pattern := scan.LockPattern(prefix)
	prog := c.newProgress("lock keys")
	var (
		mu  sync.Mutex
		all []lockInfo
	)
	err := scan.Each(ctx, client, func(ctx context.Context, node *redis.Client) error {
		if n, err := node.DBSize(ctx).Result(); err == nil {
			prog.addTotal(n)
		}
		return scan.Keys(ctx, node, pattern, count, func(keys []string) error {
			names := scan.Names(prefix, match, keys)
			prog.add(len(names))
			if len(names) == 0 {
				return nil
			}
			infos, err := c.readLocks(ctx, locker, prefix, names)
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

// readLocks reads each resource of names with locker.Inspect, up to scan.Inspectors at
// once. Resources that neither a holder nor a waiter has are left out: released since the
// scan, or a shared or limited lock's hash outliving its last holder. A resource that Redis
// cannot read (a key of an unexpected type) is reported on stderr and left out; other errors
// end the scan.
func (c *cli) readLocks(ctx context.Context, locker *fencing.Locker, prefix string, names []string) ([]lockInfo, error) {
	statuses, errs := scan.Inspect(ctx, locker, names)
	var out []lockInfo
	for i, st := range statuses {
		if err := errs[i]; err != nil {
			if !scan.OneResource(err) {
				return nil, err
			}
			fmt.Fprintf(c.stderr, "fencekit locks: skipped: %v\n", err)
			continue
		}
		if scan.Empty(st) {
			continue
		}
		out = append(out, lockOf(prefix, st))
	}
	return out, nil
}

// lockOf returns what locks prints of st.
func lockOf(prefix string, st *fencing.Status) lockInfo {
	info := lockInfo{
		Resource:     st.Resource,
		Key:          wire.For(prefix, st.Resource).Lock,
		TTLMs:        latestLease(st),
		Waiters:      int64(len(st.Waiters)),
		WaiterLabels: waiterLabels(st),
		OldestWaitMs: oldestWait(st),
	}
	info.Mode, info.Limit = holdersMode(st)
	switch info.Mode {
	case modeExclusive:
		h := st.Holders[0]
		info.Value, info.Owner, info.Label, info.Token = wire.Value(h.Owner, h.Token), h.Owner, h.Label, h.Token
	case modeFree:
	default:
		info.Holders = holdersOf(st)
		info.Token = st.Holders[len(st.Holders)-1].Token
	}
	return info
}
