package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/servercheck"
)

const checkHelp = `Audits the settings of every server behind the URL (every primary with --cluster) with
package servercheck's Check: the eviction policy, persistence and replicas, and whether they let
tokens go back; it also names the server and version found (Redis or Valkey). It sends no write. Pass --time-floor and --replicas as your Locker is
configured (WithServerTimeFloor, WithReplicas) for the same verdict.

Exits 3 when a server is unsafe (maxmemory-policy allkeys-*: it may evict fence counters,
and tokens start again at 1), so it can gate a deploy; warnings alone exit 0.

Example:
  fencekit check -u "$REDIS_URL" || exit 1
  fencekit check --cluster -u 'redis://10.0.0.1:7000' --replicas 1 --json
`

// checkOutput is what check --json prints.
type checkOutput struct {
	Nodes            []nodeOutput `json:"nodes"`
	TokensCanRegress bool         `json:"tokens_can_regress"`
	Unsafe           bool         `json:"unsafe"`
	Warnings         []string     `json:"warnings"`
	// Error is the error servercheck.Check returned, if any.
	Error string `json:"error,omitempty"`
}

type nodeOutput struct {
	Addr             string   `json:"addr"`
	Server           string   `json:"server"`
	Version          string   `json:"version"`
	Role             string   `json:"role"`
	Replicas         int      `json:"replicas"`
	EvictionPolicy   string   `json:"maxmemory_policy"`
	MaxMemory        int64    `json:"maxmemory"`
	AppendOnly       bool     `json:"appendonly"`
	AppendFsync      string   `json:"appendfsync"`
	Save             string   `json:"save"`
	Persistence      string   `json:"persistence"`
	TokensCanRegress bool     `json:"tokens_can_regress"`
	Unsafe           bool     `json:"unsafe"`
	Warnings         []string `json:"warnings"`
}

func (c *cli) check(ctx context.Context, args []string) int {
	fs, o := c.newFlags("check", "[flags]", checkHelp)
	floor := fs.Bool("time-floor", false, "the Locker uses WithServerTimeFloor")
	replicas := fs.Int("replicas", 0, "the Locker uses WithReplicas(`N`, ...)")
	pos, code, ok := c.parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(fs, "unexpected argument %q", pos[0])
	}
	if *replicas < 0 {
		return c.usageError(fs, "--replicas must not be negative")
	}
	client, code, ok := c.connectOrFail(fs, o)
	if !ok {
		return code
	}
	defer client.Close()

	opts := []fencing.Option{fencing.WithPrefix(o.prefix)}
	if *floor {
		opts = append(opts, fencing.WithServerTimeFloor())
	}
	if *replicas > 0 {
		opts = append(opts, fencing.WithReplicas(*replicas, time.Second))
	}
	locker := fencing.New(client, opts...)
	defer locker.Close()
	rep, err := servercheck.Check(ctx, locker)
	unsafe := errors.Is(err, servercheck.ErrUnsafe)

	out := checkOutput{TokensCanRegress: rep.TokensCanRegress, Unsafe: unsafe, Warnings: rep.Warnings, Nodes: []nodeOutput{}}
	if out.Warnings == nil {
		out.Warnings = []string{}
	}
	if err != nil {
		out.Error = err.Error()
	}
	for _, n := range rep.Nodes {
		w := n.Warnings
		if w == nil {
			w = []string{}
		}
		out.Nodes = append(out.Nodes, nodeOutput{
			Addr: n.Addr, Server: n.Server, Version: n.Version, Role: n.Role, Replicas: n.Replicas, EvictionPolicy: n.EvictionPolicy,
			MaxMemory: n.MaxMemory, AppendOnly: n.AppendOnly, AppendFsync: n.AppendFsync, Save: n.Save,
			Persistence: n.Persistence, TokensCanRegress: n.TokensCanRegress, Unsafe: n.Unsafe, Warnings: w,
		})
	}
	if o.json {
		if werr := writeJSON(c.stdout, out); werr != nil {
			return c.fail("check", werr)
		}
	} else {
		c.printCheck(out)
	}
	switch {
	case unsafe:
		return exitUnsafe
	case err != nil:
		fmt.Fprintf(c.stderr, "fencekit check: %v\n", err)
		return exitError
	}
	return exitOK
}

func (c *cli) printCheck(out checkOutput) {
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "NODE\tROLE\tREPLICAS\tMAXMEMORY-POLICY\tMAXMEMORY\tPERSISTENCE\tTOKENS CAN REGRESS\tUNSAFE\tSERVER")
	for _, n := range out.Nodes {
		replicas := strconv.Itoa(n.Replicas)
		if n.Replicas < 0 {
			replicas = "?"
		}
		maxmem := "?"
		switch {
		case n.MaxMemory == 0:
			maxmem = "no limit"
		case n.MaxMemory > 0:
			maxmem = byteSize(n.MaxMemory)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Addr, orDash(n.Role), replicas, orDash(n.EvictionPolicy),
			maxmem, orDash(n.Persistence), yesNo(n.TokensCanRegress), yesNo(n.Unsafe), orDash(strings.TrimSpace(n.Server+" "+n.Version)))
	}
	_ = tw.Flush()
	if len(out.Warnings) > 0 {
		fmt.Fprintln(c.stdout, "\nWarnings:")
		for _, w := range out.Warnings {
			fmt.Fprintf(c.stdout, "  - %s\n", w)
		}
	}
	fmt.Fprintln(c.stdout)
	switch {
	case out.Unsafe:
		fmt.Fprintln(c.stdout, "Verdict: UNSAFE: a server may evict fence counters and tokens would start again at 1; set maxmemory-policy noeviction.")
	case out.Error != "":
		fmt.Fprintln(c.stdout, "Verdict: unknown: the settings could not all be read.")
	case out.TokensCanRegress:
		fmt.Fprintln(c.stdout, "Verdict: usable, but tokens can go back after the events warned about above.")
	default:
		fmt.Fprintln(c.stdout, "Verdict: safe: tokens cannot go back short of operator error.")
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
