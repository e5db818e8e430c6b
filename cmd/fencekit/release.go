package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/wire"
)

const releaseHelp = `Frees a stuck lock: reads its holders with the Locker's Inspect, asks for confirmation
(unless --yes), then releases the holder read with the Locker's ForceRelease, only if it still
holds the resource, so a lock that changed hands meanwhile is left alone. It prints the token
its holder had. --force is required: this takes a lock away from a holder that may still be
working.

This is safe for data when the store checks tokens: the next holder gets a higher token, so
writes the old holder still sends with its token are refused. Without such a store, the old
holder and the next one may both write. The release hands the resource on as the holder's own
Release would: the next waiters queued for it get it at once, in the same step, with new
tokens. The old holder's Extend and Release (and the renewal of its Do) fail with ErrNotHeld.

A shared resource (fencing.Shared) and a limited one (fencing.WithLimit) have several
holders: release frees one, the only holder's or, with several, the one --token names; the
other holders keep theirs. With --token, an exclusive lock is released only if its token is N.

Exits 4 when no lock is held (or no holder has the --token given), 1 when the answer is not
"yes" or the lock changed meanwhile (or a shared or limited resource has several holders and
no --token).

Example:
  fencekit release --force order-42
  fencekit release --force --yes 'tenant{7}/invoice' --json
`

// releaseOutput is what release --json prints.
type releaseOutput struct {
	Resource string `json:"resource"`
	Released bool   `json:"released"`
	// Mode is the mode of the lock found: "exclusive", "shared", "limit" or "unknown"; left
	// out when none was found.
	Mode string `json:"mode,omitempty"`
	// Value is the holder's lock value, "<owner>:<token>".
	Value string `json:"value"`
	Owner string `json:"owner"`
	// Label is the holder's label (fencing.WithLabel), "" without one.
	Label string `json:"label"`
	Token int64  `json:"token"`
	// Reason says why the lock was not released: "not found", "declined", "changed" or
	// "several holders" (a shared or limited resource, without --token).
	Reason string `json:"reason,omitempty"`
}

func (c *cli) release(ctx context.Context, args []string) int {
	fs, o := c.newFlags("release", "--force [--yes] [flags] RESOURCE", releaseHelp)
	force := fs.Bool("force", false, "required: take the lock away from its holder")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	slot := fs.Int64("token", 0, "release only the holder with token `N` (needed for a shared or limited resource with several holders)")
	pos, code, ok := c.parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || pos[0] == "" {
		return c.usageError(fs, "want one RESOURCE, got %d arguments", len(pos))
	}
	if !*force {
		return c.usageError(fs, "release needs --force: it takes the lock away from a holder that may still be working")
	}
	client, code, ok := c.connectOrFail(fs, o)
	if !ok {
		return code
	}
	defer client.Close()
	locker := newLocker(client, o)
	defer locker.Close()

	name := pos[0]
	out := releaseOutput{Resource: name}
	st, err := locker.Inspect(ctx, name)
	if err != nil {
		return c.failLocker(fs, err)
	}
	if len(st.Holders) == 0 {
		out.Reason = "not found"
		return c.releaseDone(o, out, exitNotFound, fmt.Sprintf("No lock is held on %s (key %s); nothing to release.", strconv.Quote(name), wire.For(o.prefix, name).Lock))
	}
	mode, limit := holdersMode(st)
	out.Mode = mode
	what := map[string]string{
		modeExclusive: "an exclusive lock",
		modeShared:    "a shared resource",
		modeLimit:     fmt.Sprintf("a limited resource (limit %d)", limit),
		modeUnknown:   "a resource of unknown mode (a hash of an earlier key layout)",
	}[mode]

	h, code, ok := c.pickHolder(o, st, mode, what, *slot, out)
	if !ok {
		return code
	}
	out.Owner, out.Label, out.Token, out.Value = h.Owner, h.Label, h.Token, wire.Value(h.Owner, h.Token)
	if !o.json {
		if mode == modeExclusive {
			fmt.Fprintf(c.stdout, "Lock on %s: token %d, owner %s%s, lease left %s.\n", strconv.Quote(name), h.Token, h.Owner, labelText(h.Label), c.ttl(leaseMs(h.TTL)))
		} else {
			fmt.Fprintf(c.stdout, "Holder of %s, %s: token %d, owner %s%s, lease left %s.\n", strconv.Quote(name), what, h.Token, h.Owner, labelText(h.Label), c.ttl(leaseMs(h.TTL)))
		}
	}
	if !*yes {
		fmt.Fprintf(c.stderr, "Release it? Its holder is not told and may still be working. Type yes or no: ")
		line, _ := bufio.NewReader(c.stdin).ReadString('\n')
		if !strings.EqualFold(strings.TrimSpace(line), "yes") {
			out.Reason = "declined"
			return c.releaseDone(o, out, exitError, "Not released.")
		}
	}

	err = locker.ForceRelease(ctx, name, h.Token)
	if errors.Is(err, fencing.ErrNotHeld) {
		return c.releaseOvertaken(ctx, locker, o, mode, out)
	}
	if err != nil {
		return c.failLocker(fs, err)
	}
	out.Released = true
	q := strconv.Quote(name)
	switch mode {
	case modeExclusive:
		return c.releaseDone(o, out, exitOK, fmt.Sprintf(`Released %s: its holder had token %d (owner %s).
This is safe for data when the store checks tokens: the next holder gets a token above %d,
so writes the old holder still sends with token %d are refused. As its holder's own Release
would, the release handed the lock at once to the next waiters queued, if any.`, q, out.Token, out.Owner, out.Token, out.Token))
	case modeShared:
		return c.releaseDone(o, out, exitOK, fmt.Sprintf(`Released a shared holder of %s: it had token %d (owner %s).
The other shared holders keep theirs; once none is left, an exclusive holder can take the
resource, with a token above %d. As the holder's own Release would, the release handed the
resource at once to the next waiters queued that it now admits, if any.`, q, out.Token, out.Owner, out.Token))
	}
	return c.releaseDone(o, out, exitOK, fmt.Sprintf(`Released a slot of %s: its holder had token %d (owner %s). The other holders keep
theirs. Fence what the holders write, not the resource: the token cannot exclude the other
holders. As the holder's own Release would, the release handed the slot at once to the next
waiter queued, if any.`, q, out.Token, out.Owner))
}

// pickHolder returns the holder of st that release frees: an exclusive lock's holder, whose
// token must be slot when slot is not 0; or the holder of a shared or limited resource with
// token slot, or its only one when slot is 0. Otherwise it prints why and returns ok false
// with the exit code.
func (c *cli) pickHolder(o *common, st *fencing.Status, mode, what string, slot int64, out releaseOutput) (h fencing.Holder, code int, ok bool) {
	q := strconv.Quote(st.Resource)
	if mode == modeExclusive {
		h = st.Holders[0]
		if slot != 0 && h.Token != slot {
			out.Reason = "not found"
			return h, c.releaseDone(o, out, exitNotFound, fmt.Sprintf("No holder of %s has token %d (its exclusive lock has token %d); nothing to release.", q, slot, h.Token)), false
		}
		return h, exitOK, true
	}
	for _, cand := range st.Holders {
		if cand.Token == slot || (slot == 0 && len(st.Holders) == 1) {
			return cand, exitOK, true
		}
	}
	if slot != 0 {
		out.Reason = "not found"
		return h, c.releaseDone(o, out, exitNotFound, fmt.Sprintf("No holder of %s has token %d; nothing to release.", q, slot)), false
	}
	tokens := make([]string, len(st.Holders))
	for i, cand := range st.Holders {
		tokens[i] = strconv.FormatInt(cand.Token, 10)
	}
	out.Reason = "several holders"
	return h, c.releaseDone(o, out, exitError, fmt.Sprintf("%s is %s with %d holders, tokens %s; name one with --token.", q, what, len(st.Holders), strings.Join(tokens, ", "))), false
}

// releaseOvertaken reports a ForceRelease that found the holder gone (ErrNotHeld): it was
// released or its lease ended (not found), or, for an exclusive lock, another acquisition
// holds the resource now (changed), which a second read tells apart.
func (c *cli) releaseOvertaken(ctx context.Context, locker *fencing.Locker, o *common, mode string, out releaseOutput) int {
	if mode == modeExclusive {
		st, err := locker.Inspect(ctx, out.Resource)
		if err != nil {
			return c.fail("release", fmt.Errorf("the lock changed hands or was released meanwhile; not released: %w", err))
		}
		if len(st.Holders) > 0 {
			out.Reason = "changed"
			if now, _ := holdersMode(st); now == modeExclusive {
				return c.releaseDone(o, out, exitError, fmt.Sprintf("The lock changed hands meanwhile (token %d now); not released. Run again to release the new holder's lock.", st.Holders[0].Token))
			}
			return c.releaseDone(o, out, exitError, "The lock changed hands meanwhile (shared or limited holders hold it now); not released. Run again to see them.")
		}
		out.Reason = "not found"
		return c.releaseDone(o, out, exitNotFound, "The lock was released or expired meanwhile; nothing to release.")
	}
	out.Reason = "not found"
	return c.releaseDone(o, out, exitNotFound, "The holder released it or its lease ended meanwhile; nothing to release.")
}

// releaseDone prints the outcome of release and returns code.
func (c *cli) releaseDone(o *common, out releaseOutput, code int, text string) int {
	if o.json {
		if err := writeJSON(c.stdout, out); err != nil {
			return c.fail("release", err)
		}
		return code
	}
	fmt.Fprintln(c.stdout, text)
	return code
}
