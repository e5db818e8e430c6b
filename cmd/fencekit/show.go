package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

const showHelp = `Shows one resource: its lock, the last token issued (the fence counter) and when the
counter expires, and the queue of waiters.

The lock is shown with its mode: exclusive (its value, owner, token and lease left), shared
(fencing.Shared: every shared holder with its token, lease left and owner) or limit n
(fencing.WithLimit: the limit and every holder likewise).

Each queue entry is shown with what its element says of its grant: the mode (exclusive,
shared or limit n), its first lease (the waiter's TTL, at most 3s, which the Locker extends),
and whether its tokens are floored at the server clock (WithServerTimeFloor; "yes, expiry D"
with WithCounterExpiry(D), which implies the floor); and with whether its Locker still waits
(its w:<id> key exists) and how long it has waited. A dead waiter is skipped at the next
grant.

Exits 4 when no lock is held on the resource; the counter and the queue are shown anyway.
Quote the name for your shell; a name with braces is found under its base64 key.

Example:
  fencekit show order-42
  fencekit show 'tenant{7}/invoice' --json
`

// showOutput is what show --json prints.
type showOutput struct {
	Resource string `json:"resource"`
	Keys     struct {
		Lock  string `json:"lock"`
		Fence string `json:"fence"`
		Queue string `json:"queue"`
	} `json:"keys"`
	// Lock is null when no lock is held.
	Lock  *lockState `json:"lock"`
	Fence fenceState `json:"fence"`
	Queue queueState `json:"queue"`
}

type lockState struct {
	// Mode is "exclusive" for a lock of one holder (a string key); "shared" (fencing.Shared)
	// or "limit" (fencing.WithLimit, Limit is then n) for a hash of holders; "unknown" for a
	// hash whose field limit is neither.
	Mode  string `json:"mode"`
	Value string `json:"value"`
	Owner string `json:"owner"`
	Token int64  `json:"token"`
	TTLMs int64  `json:"ttl_ms"`
	// Limit and Holders describe a shared or limited resource, whose lock key is a hash: the
	// limit (left out for shared) and the live holders, by token. Token is then the highest,
	// TTLMs the key's (the latest lease), Value and Owner empty. Left out for an exclusive lock.
	Limit   int          `json:"limit,omitempty"`
	Holders []holderInfo `json:"holders,omitempty"`
}

type fenceState struct {
	// LastToken is the last token issued; null when there is no counter.
	LastToken *int64 `json:"last_token"`
	// Raw is the counter's value when it is not an integer.
	Raw string `json:"raw,omitempty"`
	// TTLMs is the counter's expiry: -1 never, -2 no counter.
	TTLMs int64 `json:"ttl_ms"`
}

type queueState struct {
	Length int64 `json:"length"`
	// TTLMs is the list's expiry: -1 never, -2 no queue.
	TTLMs   int64        `json:"ttl_ms"`
	Entries []queueEntry `json:"entries"`
}

type queueEntry struct {
	Position int `json:"position"`
	// ID is the waiting Locker's id; Element is the waiter's queue element,
	// "<id>.<n>.<lease ms><rules>".
	ID      string `json:"id"`
	Element string `json:"element"`
	// Mode, Limit, LeaseMs, Floor and CounterExpiryMs are what the element says of the
	// grant: its mode ("exclusive", "shared", or "limit" with Limit n), its first lease (the
	// waiter's TTL, at most 3 s), whether its tokens are floored at the server clock (rule f,
	// or e<ms>), and the counter's expiry (rule e<ms>; null without it). For an element the
	// scripts cannot read (they drop it), Mode is "unknown" and the others are null.
	Mode            string `json:"mode"`
	Limit           int    `json:"limit,omitempty"`
	LeaseMs         *int64 `json:"lease_ms"`
	Floor           *bool  `json:"floor"`
	CounterExpiryMs *int64 `json:"counter_expiry_ms"`
	// Live reports whether the waiter's w:<id> key exists; SinceUnixMs and WaitingMs are
	// null without it.
	Live        bool   `json:"live"`
	SinceUnixMs *int64 `json:"since_unix_ms"`
	WaitingMs   *int64 `json:"waiting_ms"`
}

func (c *cli) show(ctx context.Context, args []string) int {
	fs, o := c.newFlags("show", "[flags] RESOURCE", showHelp)
	limit := fs.Int64("limit", 100, "show at most `N` queue entries")
	pos, code, ok := c.parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return c.usageError(fs, "want one RESOURCE, got %d arguments", len(pos))
	}
	if pos[0] == "" {
		return c.usageError(fs, "empty RESOURCE")
	}
	if *limit <= 0 {
		return c.usageError(fs, "--limit must be positive")
	}
	client, code, ok := c.connectOrFail(fs, o)
	if !ok {
		return code
	}
	defer client.Close()

	out, err := c.readResource(ctx, client, o.prefix, pos[0], *limit)
	if err != nil {
		return c.fail("show", err)
	}
	if o.json {
		if err := writeJSON(c.stdout, out); err != nil {
			return c.fail("show", err)
		}
	} else {
		c.printShow(out)
	}
	if out.Lock == nil {
		return exitNotFound
	}
	return exitOK
}

// readResource reads one resource's keys.
func (c *cli) readResource(ctx context.Context, client redis.Cmdable, prefix, name string, limit int64) (showOutput, error) {
	k := keysFor(prefix, name)
	var out showOutput
	out.Resource = name
	out.Keys.Lock, out.Keys.Fence, out.Keys.Queue = k.lock, k.fence, k.queue
	out.Queue.Entries = []queueEntry{}

	pipe := client.Pipeline()
	clock := pipe.Time(ctx)
	lockGet, lockTTL := pipe.Get(ctx, k.lock), pipe.PTTL(ctx, k.lock)
	lockHash := pipe.HGetAll(ctx, k.lock) // a shared or limited resource's holders (GET fails)
	fenceGet, fenceTTL := pipe.Get(ctx, k.fence), pipe.PTTL(ctx, k.fence)
	qLen, qTTL := pipe.LLen(ctx, k.queue), pipe.PTTL(ctx, k.queue)
	qRange := pipe.LRange(ctx, k.queue, 0, limit-1)
	if _, err := pipe.Exec(ctx); transportError(err) != nil {
		return out, err
	}
	if v, err := lockGet.Result(); err == nil {
		owner, token := parseLockValue(v)
		out.Lock = &lockState{Mode: modeExclusive, Value: v, Owner: owner, Token: token, TTLMs: pttlMs(lockTTL)}
	} else if h, err := lockHash.Result(); err == nil && len(h) > 0 {
		mode, limit, holders := parseHolders(h, serverNow(clock, c.now()))
		if len(holders) > 0 {
			out.Lock = &lockState{Mode: mode, Token: holders[len(holders)-1].Token, TTLMs: pttlMs(lockTTL), Limit: limit, Holders: holders}
		}
	}
	if v, err := fenceGet.Result(); err == nil {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out.Fence.LastToken = &n
		} else {
			out.Fence.Raw = v
		}
	}
	out.Fence.TTLMs = pttlMs(fenceTTL)
	out.Queue.Length, out.Queue.TTLMs = qLen.Val(), pttlMs(qTTL)

	ids := qRange.Val()
	if len(ids) == 0 {
		return out, nil
	}
	pipe = client.Pipeline()
	waiters := map[string]*redis.StringCmd{}
	for _, id := range ids {
		if waiters[id] == nil {
			waiters[id] = pipe.Get(ctx, k.waiter(id))
		}
	}
	if _, err := pipe.Exec(ctx); transportError(err) != nil {
		return out, err
	}
	now := c.now().UnixMilli()
	for i, id := range ids {
		e := queueEntry{Position: i, ID: lockerOf(id), Element: id, Mode: modeUnknown}
		if el, ok := parseElement(id); ok {
			e.Mode, e.Limit, e.LeaseMs, e.Floor = el.mode, el.limit, &el.leaseMs, &el.floor
			if el.expiryMs > 0 {
				e.CounterExpiryMs = &el.expiryMs
			}
		}
		if v, err := waiters[id].Result(); err == nil {
			if ws, ok := parseWaiter(v); ok {
				wait := max(now-ws.sinceMs, 0)
				e.Live, e.SinceUnixMs, e.WaitingMs = true, &ws.sinceMs, &wait
			}
		}
		out.Queue.Entries = append(out.Queue.Entries, e)
	}
	return out, nil
}

func (c *cli) printShow(out showOutput) {
	w := c.stdout
	fmt.Fprintf(w, "Resource:    %s\n", displayName(out.Resource))
	fmt.Fprintf(w, "Keys:        %s*\n", out.Keys.Lock[:len(out.Keys.Lock)-len(suffixLock)])
	switch l := out.Lock; {
	case l == nil:
		fmt.Fprintln(w, "Lock:        not held")
	case l.Mode == modeExclusive:
		token := strconv.FormatInt(l.Token, 10)
		if l.Token == 0 {
			token = "unreadable"
		}
		fmt.Fprintf(w, "Lock:        exclusive, token %s, lease left %s, owner %s\n", token, c.ttl(l.TTLMs), l.Owner)
	default:
		switch l.Mode {
		case modeShared:
			fmt.Fprintf(w, "Lock:        shared by %s\n", plural(len(l.Holders), "holder"))
		case modeLimit:
			fmt.Fprintf(w, "Lock:        limit %d, %d held\n", l.Limit, len(l.Holders))
		default:
			fmt.Fprintf(w, "Lock:        unknown mode (field limit is neither shared nor a limit), %s\n", plural(len(l.Holders), "holder"))
		}
		for _, h := range l.Holders {
			fmt.Fprintf(w, "  holder:    token %d, lease left %s, owner %s\n", h.Token, c.ttl(h.TTLMs), h.Owner)
		}
	}
	switch f := out.Fence; {
	case f.LastToken == nil && f.Raw == "":
		fmt.Fprintln(w, "Last token:  none (no counter)")
	case f.LastToken == nil:
		fmt.Fprintf(w, "Last token:  unreadable counter %q\n", f.Raw)
	case f.TTLMs == -1:
		fmt.Fprintf(w, "Last token:  %d, counter never expires\n", *f.LastToken)
	default:
		fmt.Fprintf(w, "Last token:  %d, counter expires in %s\n", *f.LastToken, c.ttl(f.TTLMs))
	}
	q := out.Queue
	if q.Length == 0 {
		fmt.Fprintln(w, "Queue:       empty")
		return
	}
	live := 0
	for _, e := range q.Entries {
		if e.Live {
			live++
		}
	}
	shown := ""
	if int64(len(q.Entries)) < q.Length {
		shown = fmt.Sprintf(" of the first %d", len(q.Entries))
	}
	expiry := "list never expires"
	if q.TTLMs >= 0 {
		expiry = "list expires in " + c.ttl(q.TTLMs)
	}
	fmt.Fprintf(w, "Queue:       %d waiter(s) queued, %d%s alive; %s\n", q.Length, live, shown, expiry)
	tw := newTable(w)
	fmt.Fprintln(tw, "  POS\tLOCKER\tMODE\tLIVE\tLEASE\tFLOOR\tWAITING")
	for _, e := range q.Entries {
		lease, floor, wait := "-", "-", "-"
		if e.LeaseMs != nil {
			lease = duration(msDuration(*e.LeaseMs))
		}
		if e.Floor != nil {
			floor = yesNo(*e.Floor)
		}
		if e.CounterExpiryMs != nil {
			floor = "yes, expiry " + duration(msDuration(*e.CounterExpiryMs))
		}
		if e.WaitingMs != nil {
			wait = duration(msDuration(*e.WaitingMs))
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Position, displayName(e.ID), modeText(e.Mode, e.Limit), yesNo(e.Live), lease, floor, wait)
	}
	_ = tw.Flush()
}
