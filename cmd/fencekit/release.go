package main

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

const releaseHelp = `Frees a stuck lock: reads it, asks for confirmation (unless --yes), then deletes it only if
it still has the value read, so a lock that changed hands meanwhile is left alone. It prints
the token its holder had. --force is required: this takes a lock away from a holder that may
still be working.

This is safe for data when the store checks tokens: the next holder gets a higher token, so
writes the old holder still sends with its token are refused. Without such a store, the old
holder and the next one may both write. Nothing is published: waiters take the lock within
about a second through their own polling. The old holder's Extend and Release fail with
ErrNotHeld.

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

//go:embed release.lua
var releaseLua string

var releaseScript = redis.NewScript(releaseLua)

//go:embed release_slot.lua
var releaseSlotLua string

var releaseSlotScript = redis.NewScript(releaseSlotLua)

// releaseOutput is what release --json prints.
type releaseOutput struct {
	Resource string `json:"resource"`
	Released bool   `json:"released"`
	// Mode is the mode of the lock found: "exclusive", "shared", "limit" or "unknown"; left
	// out when none was found.
	Mode  string `json:"mode,omitempty"`
	Value string `json:"value"`
	Owner string `json:"owner"`
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

	name := pos[0]
	k := keysFor(o.prefix, name)
	out := releaseOutput{Resource: name}
	pipe := client.Pipeline()
	get, pttl := pipe.Get(ctx, k.lock), pipe.PTTL(ctx, k.lock)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && !strings.Contains(err.Error(), "WRONGTYPE") {
		return c.fail("release", err)
	}
	value, err := get.Result()
	if err != nil && strings.Contains(err.Error(), "WRONGTYPE") {
		return c.releaseHolder(ctx, client, o, k, name, *slot, *yes, out)
	}
	if errors.Is(err, redis.Nil) {
		out.Reason = "not found"
		return c.releaseDone(o, out, exitNotFound, fmt.Sprintf("No lock is held on %s (key %s); nothing to release.", strconv.Quote(name), k.lock))
	}
	if err != nil {
		return c.fail("release", fmt.Errorf("read %s: %w", k.lock, err))
	}
	out.Mode, out.Value = modeExclusive, value
	out.Owner, out.Token = parseLockValue(value)
	if *slot != 0 && out.Token != *slot {
		out.Reason = "not found"
		return c.releaseDone(o, out, exitNotFound, fmt.Sprintf("No holder of %s has token %d (its exclusive lock has %s); nothing to release.", strconv.Quote(name), *slot, tokenText(out.Token)))
	}
	if !o.json && out.Token > 0 {
		fmt.Fprintf(c.stdout, "Lock on %s: token %d, owner %s, lease left %s.\n", strconv.Quote(name), out.Token, out.Owner, c.ttl(pttlMs(pttl)))
	} else if !o.json {
		fmt.Fprintf(c.stdout, "Lock on %s: value %q without a token, lease left %s.\n", strconv.Quote(name), value, c.ttl(pttlMs(pttl)))
	}
	if !*yes {
		fmt.Fprintf(c.stderr, "Release it? Its holder is not told and may still be working. Type yes or no: ")
		line, _ := bufio.NewReader(c.stdin).ReadString('\n')
		if !strings.EqualFold(strings.TrimSpace(line), "yes") {
			out.Reason = "declined"
			return c.releaseDone(o, out, exitError, "Not released.")
		}
	}
	res, err := releaseScript.Run(ctx, client, []string{k.lock}, value).Result()
	if err != nil {
		return c.fail("release", err)
	}
	switch v := res.(type) {
	case int64:
		if v == 0 {
			out.Reason = "not found"
			return c.releaseDone(o, out, exitNotFound, "The lock was released or expired meanwhile; nothing to release.")
		}
		if v < 0 {
			out.Reason = "changed"
			return c.releaseDone(o, out, exitError, "The lock changed hands meanwhile (shared or limited holders hold it now); not released. Run again to see them.")
		}
	case string:
		out.Reason = "changed"
		_, now := parseLockValue(v)
		return c.releaseDone(o, out, exitError, fmt.Sprintf("The lock changed hands meanwhile (token %d now); not released. Run again to release the new holder's lock.", now))
	default:
		return c.fail("release", fmt.Errorf("unexpected reply %v", res))
	}
	out.Released = true
	if out.Token <= 0 {
		return c.releaseDone(o, out, exitOK, fmt.Sprintf("Released %s: its value %q had no token.", strconv.Quote(name), value))
	}
	return c.releaseDone(o, out, exitOK, fmt.Sprintf(`Released %s: its holder had token %d (owner %s).
This is safe for data when the store checks tokens: the next holder gets a token above %d,
so writes the old holder still sends with token %d are refused. Waiters take the lock within
about a second through their own polling; nothing was published.`, strconv.Quote(name), out.Token, out.Owner, out.Token, out.Token))
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

// releaseHolder frees one holder of a shared or limited resource, whose lock key k.lock is
// a hash: the holder with token slot, or the only holder when slot is 0.
func (c *cli) releaseHolder(ctx context.Context, client redis.UniversalClient, o *common, k resourceKeys, name string, slot int64, yes bool, out releaseOutput) int {
	pipe := client.Pipeline()
	clock := pipe.Time(ctx)
	hash := pipe.HGetAll(ctx, k.lock)
	if _, err := pipe.Exec(ctx); err != nil {
		return c.fail("release", fmt.Errorf("read %s: %w", k.lock, err))
	}
	mode, limit, holders := parseHolders(hash.Val(), serverNow(clock, c.now()))
	what := map[string]string{
		modeShared: "a shared resource",
		modeLimit:  fmt.Sprintf("a limited resource (limit %d)", limit),
	}[mode]
	if what == "" {
		what = "a resource of unknown mode (its field limit is neither shared nor a limit)"
	}
	if len(holders) == 0 {
		out.Reason = "not found"
		return c.releaseDone(o, out, exitNotFound, fmt.Sprintf("No lock is held on %s (key %s: every lease ended); nothing to release.", strconv.Quote(name), k.lock))
	}
	out.Mode = mode
	var pick *holderInfo
	for i, h := range holders {
		if h.Token == slot || (slot == 0 && len(holders) == 1) {
			pick = &holders[i]
		}
	}
	if pick == nil {
		if slot == 0 {
			tokens := make([]string, len(holders))
			for i, h := range holders {
				tokens[i] = strconv.FormatInt(h.Token, 10)
			}
			out.Reason = "several holders"
			return c.releaseDone(o, out, exitError, fmt.Sprintf("%s is %s with %d holders, tokens %s; name one with --token.", strconv.Quote(name), what, len(holders), strings.Join(tokens, ", ")))
		}
		out.Reason = "not found"
		return c.releaseDone(o, out, exitNotFound, fmt.Sprintf("No holder of %s has token %d; nothing to release.", strconv.Quote(name), slot))
	}
	out.Owner, out.Token = pick.Owner, pick.Token
	out.Value = pick.Owner + ":" + strconv.FormatInt(pick.Token, 10)
	if !o.json {
		fmt.Fprintf(c.stdout, "Holder of %s, %s: token %d, owner %s, lease left %s.\n", strconv.Quote(name), what, pick.Token, pick.Owner, c.ttl(pick.TTLMs))
	}
	if !yes {
		fmt.Fprintf(c.stderr, "Release it? Its holder is not told and may still be working. Type yes or no: ")
		line, _ := bufio.NewReader(c.stdin).ReadString('\n')
		if !strings.EqualFold(strings.TrimSpace(line), "yes") {
			out.Reason = "declined"
			return c.releaseDone(o, out, exitError, "Not released.")
		}
	}
	n, err := releaseSlotScript.Run(ctx, client, []string{k.lock}, out.Value).Int64()
	if err != nil {
		return c.fail("release", err)
	}
	if n == 0 {
		out.Reason = "not found"
		return c.releaseDone(o, out, exitNotFound, "The holder released it or its lease ended meanwhile; nothing to release.")
	}
	out.Released = true
	if mode == modeShared {
		return c.releaseDone(o, out, exitOK, fmt.Sprintf(`Released a shared holder of %s: it had token %d (owner %s).
The other shared holders keep theirs; once none is left, an exclusive holder can take the
resource, with a token above %d. Waiters take it within about a second through their own
polling; nothing was published.`, strconv.Quote(name), out.Token, out.Owner, out.Token))
	}
	return c.releaseDone(o, out, exitOK, fmt.Sprintf(`Released a slot of %s: its holder had token %d (owner %s). The other holders keep
theirs. Fence what the holders write, not the resource: the token cannot exclude the other
holders. Waiters take the slot within about a second through their own polling; nothing was
published.`, strconv.Quote(name), out.Token, out.Owner))
}

// tokenText formats a lock's token, 0 when its value has none.
func tokenText(token int64) string {
	if token <= 0 {
		return "no token"
	}
	return "token " + strconv.FormatInt(token, 10)
}
