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

Exits 4 when no lock is held, 1 when the answer is not "yes" or the lock changed meanwhile.

Example:
  fencekit release --force order-42
  fencekit release --force --yes 'tenant{7}/invoice' --json
`

//go:embed release.lua
var releaseLua string

var releaseScript = redis.NewScript(releaseLua)

// releaseOutput is what release --json prints.
type releaseOutput struct {
	Resource string `json:"resource"`
	Released bool   `json:"released"`
	Value    string `json:"value"`
	Owner    string `json:"owner"`
	Token    int64  `json:"token"`
	// Reason says why the lock was not released: "not found", "declined" or "changed".
	Reason string `json:"reason,omitempty"`
}

func (c *cli) release(ctx context.Context, args []string) int {
	fs, o := c.newFlags("release", "--force [--yes] [flags] RESOURCE", releaseHelp)
	force := fs.Bool("force", false, "required: take the lock away from its holder")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
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
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return c.fail("release", err)
	}
	value, err := get.Result()
	if errors.Is(err, redis.Nil) {
		out.Reason = "not found"
		return c.releaseDone(o, out, exitNotFound, fmt.Sprintf("No lock is held on %s (key %s); nothing to release.", strconv.Quote(name), k.lock))
	}
	if err != nil {
		return c.fail("release", fmt.Errorf("read %s: %w", k.lock, err))
	}
	out.Value = value
	out.Owner, out.Token = parseLockValue(value)
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
