package main

import (
	"context"
	"fmt"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/wire"
)

const showHelp = `Shows one resource as the Locker's Inspect reads it, in one round trip: its holders, the
last token issued (the fence counter) and when the counter expires, and the waiters queued.

The lock is shown with its mode: exclusive (its owner, token and lease left), shared
(fencing.Shared: every shared holder with its token, lease left and owner) or limit n
(fencing.WithLimit: the limit and every holder likewise).

Each holder and each waiter is shown with its label (fencing.WithLabel), if it has one.
Each waiter is shown in queue order with the kind of acquisition it waits for (exclusive,
shared or limit n), whether its tokens are floored at the server clock (WithServerTimeFloor;
"yes, expiry D" with WithCounterExpiry(D), which implies the floor), whether its Locker still
waits (a dead waiter is skipped when it reaches the head) and how long it has waited.

Exits 4 when no lock is held on the resource; the counter and the waiters are shown anyway.
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
	// Mode is "exclusive" for a lock of one holder; "shared" (fencing.Shared) or "limit"
	// (fencing.WithLimit, Limit is then n) for several; "unknown" for holders whose kind
	// cannot be read (a hash of an earlier key layout with an odd limit).
	Mode string `json:"mode"`
	// Value is the exclusive holder's lock value, "<owner>:<token>"; empty for the others.
	Value string `json:"value"`
	Owner string `json:"owner"`
	// Label is the exclusive holder's label (fencing.WithLabel); "" without one, and for
	// the others (see Holders).
	Label string `json:"label"`
	Token int64  `json:"token"`
	TTLMs int64  `json:"ttl_ms"`
	// Limit and Holders describe a shared or limited resource: the limit (left out for
	// shared) and the live holders, by token. Token is then the highest, TTLMs the latest
	// lease, Value and Owner empty. Left out for an exclusive lock.
	Limit   int          `json:"limit,omitempty"`
	Holders []holderInfo `json:"holders,omitempty"`
}

type fenceState struct {
	// LastToken is the last token issued; null when there is no counter.
	LastToken *int64 `json:"last_token"`
	// NextToken is the lowest token the next acquisition gets (fencing.Status.NextToken).
	NextToken int64 `json:"next_token"`
	// TTLMs is the counter's expiry: -1 never, -2 no counter.
	TTLMs int64 `json:"ttl_ms"`
}

type queueState struct {
	// Length is the number of waiters queued.
	Length  int64        `json:"length"`
	Entries []queueEntry `json:"entries"`
}

type queueEntry struct {
	Position int `json:"position"`
	// ID is the waiting Locker's id; Label is the waiting call's label (fencing.WithLabel),
	// "" without one.
	ID    string `json:"id"`
	Label string `json:"label"`
	// Mode, Limit, Floor and CounterExpiryMs are what its grant will be: its mode
	// ("exclusive", "shared", or "limit" with Limit n), whether its tokens are floored at the
	// server clock (WithServerTimeFloor, or WithCounterExpiry), and the counter's expiry
	// (WithCounterExpiry; null without it).
	Mode            string `json:"mode"`
	Limit           int    `json:"limit,omitempty"`
	Floor           bool   `json:"floor"`
	CounterExpiryMs *int64 `json:"counter_expiry_ms"`
	// Live reports whether the waiter's Locker still waits; WaitingMs is how long it has
	// waited, null for a dead waiter.
	Live      bool   `json:"live"`
	WaitingMs *int64 `json:"waiting_ms"`
}

func (c *cli) show(ctx context.Context, args []string) int {
	fs, o := c.newFlags("show", "[flags] RESOURCE", showHelp)
	limit := fs.Int64("limit", 100, "show at most `N` waiters")
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
	locker := newLocker(client, o)
	defer locker.Close()

	st, err := locker.Inspect(ctx, pos[0])
	if err != nil {
		return c.failLocker(fs, err)
	}
	out := showStatus(o.prefix, st, *limit)
	if o.json {
		if err := writeJSON(c.stdout, out); err != nil {
			return c.fail("show", err)
		}
	} else {
		c.printShow(out, wire.For(o.prefix, st.Resource).Base())
	}
	if out.Lock == nil {
		return exitNotFound
	}
	return exitOK
}

// showStatus returns what show prints of st, with at most limit waiters.
func showStatus(prefix string, st *fencing.Status, limit int64) showOutput {
	var out showOutput
	out.Resource = st.Resource
	k := wire.For(prefix, st.Resource)
	out.Keys.Lock, out.Keys.Fence, out.Keys.Queue = k.Lock, k.Fence, k.Queue

	if mode, limit := holdersMode(st); mode == modeExclusive {
		h := st.Holders[0]
		out.Lock = &lockState{Mode: mode, Value: wire.Value(h.Owner, h.Token), Owner: h.Owner, Label: h.Label, Token: h.Token, TTLMs: leaseMs(h.TTL)}
	} else if mode != modeFree {
		top := st.Holders[len(st.Holders)-1]
		out.Lock = &lockState{Mode: mode, Token: top.Token, TTLMs: latestLease(st), Limit: limit, Holders: holdersOf(st)}
	}

	out.Fence = fenceState{NextToken: st.NextToken, TTLMs: -2}
	if st.NextToken > 1 {
		last := st.NextToken - 1
		out.Fence.LastToken, out.Fence.TTLMs = &last, -1
		if st.CounterTTL > 0 {
			out.Fence.TTLMs = st.CounterTTL.Milliseconds()
		}
	}

	out.Queue.Length = int64(len(st.Waiters))
	out.Queue.Entries = []queueEntry{}
	for i, w := range st.Waiters {
		if int64(i) >= limit {
			break
		}
		e := queueEntry{Position: i, ID: w.Locker, Label: w.Label, Floor: w.TimeFloor, Live: w.Alive}
		e.Mode, e.Limit = waiterMode(w)
		if w.CounterExpiry > 0 {
			ms := w.CounterExpiry.Milliseconds()
			e.CounterExpiryMs = &ms
		}
		if w.Alive {
			ms := w.Waiting.Milliseconds()
			e.WaitingMs = &ms
		}
		out.Queue.Entries = append(out.Queue.Entries, e)
	}
	return out
}

// printShow prints out as a table; base is the part common to the resource's keys.
func (c *cli) printShow(out showOutput, base string) {
	w := c.stdout
	fmt.Fprintf(w, "Resource:    %s\n", displayName(out.Resource))
	fmt.Fprintf(w, "Keys:        %s*\n", base)
	switch l := out.Lock; {
	case l == nil:
		fmt.Fprintln(w, "Lock:        not held")
	case l.Mode == modeExclusive:
		fmt.Fprintf(w, "Lock:        exclusive, token %d, lease left %s, owner %s%s\n", l.Token, c.ttl(l.TTLMs), l.Owner, labelText(l.Label))
	default:
		switch l.Mode {
		case modeShared:
			fmt.Fprintf(w, "Lock:        shared by %s\n", plural(len(l.Holders), "holder"))
		case modeLimit:
			fmt.Fprintf(w, "Lock:        limit %d, %d held\n", l.Limit, len(l.Holders))
		default:
			fmt.Fprintf(w, "Lock:        unknown mode (a hash of an earlier key layout, whose limit is neither shared nor a limit), %s\n", plural(len(l.Holders), "holder"))
		}
		for _, h := range l.Holders {
			fmt.Fprintf(w, "  holder:    token %d, lease left %s, owner %s%s\n", h.Token, c.ttl(h.TTLMs), h.Owner, labelText(h.Label))
		}
	}
	switch f := out.Fence; {
	case f.LastToken == nil:
		fmt.Fprintln(w, "Last token:  none (no counter)")
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
	fmt.Fprintf(w, "Queue:       %d waiter(s) queued, %d%s alive\n", q.Length, live, shown)
	tw := newTable(w)
	fmt.Fprintln(tw, "  POS\tLOCKER\tLABEL\tMODE\tLIVE\tFLOOR\tWAITING")
	for _, e := range q.Entries {
		floor, wait := yesNo(e.Floor), "-"
		if e.CounterExpiryMs != nil {
			floor = "yes, expiry " + duration(msDuration(*e.CounterExpiryMs))
		}
		if e.WaitingMs != nil {
			wait = c.age(*e.WaitingMs)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Position, displayName(e.ID), labelCell(e.Label), modeText(e.Mode, e.Limit), yesNo(e.Live), floor, wait)
	}
	_ = tw.Flush()
}
