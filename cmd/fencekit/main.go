// Command fencekit shows and operates the fenced locks that package fencing keeps in Redis:
// the locks held, one resource's lock, counter and queue, the server audit, a forced release
// of a stuck lock, statistics of the keys left behind, and the operators' page (package
// dashboard) served on its own.
//
// Run "fencekit --help" for the commands and exit codes, and "fencekit COMMAND --help" for
// each command's flags and an example. docs/cli.md has a sample session.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9/logging"
)

// Exit codes; fencekit --help documents them.
const (
	exitOK       = 0 // done
	exitError    = 1 // Redis unreachable or failing, a release declined or overtaken
	exitUsage    = 2 // bad command line
	exitUnsafe   = 3 // check: a server may evict fence counters (servercheck.ErrUnsafe)
	exitNotFound = 4 // show or release: no lock held on the resource
)

func main() {
	logging.Disable() // go-redis would log dial failures; fencekit reports errors itself
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{
		stdin:         stdin,
		stdout:        stdout,
		stderr:        stderr,
		getenv:        os.Getenv,
		progressEvery: time.Second,
	}
	return c.run(ctx, args)
}

// cli holds what a command reads and writes; tests fill in their own.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// progressEvery is how long a scan runs before it reports progress on stderr, and then
	// the interval between reports.
	progressEvery time.Duration
	// grain, when positive, rounds the times read from Redis (leases and counters left,
	// waits) before they are printed in tables; tests use it for stable output.
	grain time.Duration
}

// A command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(c *cli, ctx context.Context, args []string) int
}

var commands = []command{
	{"locks", "list the locks held, soonest to expire first", (*cli).locks},
	{"show", "show one resource: its holders, last token, counter expiry and waiters", (*cli).show},
	{"check", "audit the server settings (servercheck.Check); exit 3 when unsafe", (*cli).check},
	{"release", "free a stuck lock and hand it to its waiters (needs --force)", (*cli).release},
	{"stats", "count locks, fence counters, queues and their memory", (*cli).stats},
	{"serve", "serve the operators' page of the locks (package dashboard) over HTTP", (*cli).serve},
}

const exitCodesHelp = `Exit codes:
  0  success
  1  error: Redis unreachable or failing; release declined or the lock changed meanwhile;
     serve cannot listen
  2  usage error: unknown command, bad flag or argument
  3  check found an unsafe server setting (maxmemory-policy allkeys-*)
  4  show or release: no lock is held on the resource
`

func (c *cli) usage(w io.Writer) {
	fmt.Fprint(w, `fencekit shows and operates fenced locks (github.com/fencekit/fencekit) on Redis.

Usage:
  fencekit COMMAND [flags] [args]
  fencekit [flags] COMMAND [args]

Commands:
`)
	for _, cmd := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprint(w, `
Flags every command takes:
  -u URL        Redis URL, redis://[user:password@]host:port[/db] or rediss://...
                (default: $REDIS_URL, else redis://127.0.0.1:6379/0)
  --cluster     connect to a Redis Cluster (redis://host:port?addr=host2:port2)
                and scan every primary
  --prefix P    key prefix given to fencing.WithPrefix (default "fencing:")
  --json        print JSON instead of a table (all but serve)

Run "fencekit COMMAND --help" for a command's flags and an example.

`+exitCodesHelp)
}

func (c *cli) run(ctx context.Context, args []string) int {
	args = commandFirst(args)
	if len(args) == 0 {
		c.usage(c.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help", "help":
		if name == "help" && len(args) > 1 {
			return c.run(ctx, []string{args[1], "--help"})
		}
		c.usage(c.stdout)
		return exitOK
	}
	for _, cmd := range commands {
		if cmd.name == name {
			return cmd.run(c, ctx, args[1:])
		}
	}
	fmt.Fprintf(c.stderr, "fencekit: unknown command %q; commands: %s\n", name, commandNames())
	return exitUsage
}

// commandFirst moves the common flags given before the command after it, so that
// "fencekit -u URL --cluster locks" works as "fencekit locks -u URL --cluster".
func commandFirst(args []string) []string {
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--" {
		switch name := strings.TrimLeft(args[i], "-"); name {
		case "u", "prefix":
			i++ // the flag's value
		case "h", "help":
			return args
		}
		i++
	}
	if i == 0 || i >= len(args) {
		return args
	}
	return append(append([]string{args[i]}, args[:i]...), args[i+1:]...)
}

func commandNames() string {
	names := make([]string, len(commands))
	for i, cmd := range commands {
		names[i] = cmd.name
	}
	return strings.Join(names, ", ")
}
