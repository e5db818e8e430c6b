package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/fencekit/fencekit/fencing"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// defaultURL is the server used when neither -u nor REDIS_URL names one, as redis-cli does.
const defaultURL = "redis://127.0.0.1:6379/0"

// common holds the flags every command takes.
type common struct {
	url     string
	cluster bool
	prefix  string
	json    bool
}

// newFlags returns a FlagSet for a command with the common flags registered. usage is the
// command's help text after the flag list: a description and an example.
func (c *cli) newFlags(name, synopsis, usage string) (*flag.FlagSet, *common) {
	fs, o := c.newServerFlags(name, synopsis, usage)
	fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
	return fs, o
}

// newServerFlags is newFlags without --json: the flags that choose the server and the
// prefix.
func (c *cli) newServerFlags(name, synopsis, usage string) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet("fencekit "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse errors and help are printed by parse
	o := &common{}
	fs.StringVar(&o.url, "u", "", "Redis `URL` (default: $REDIS_URL, else "+defaultURL+")")
	fs.BoolVar(&o.cluster, "cluster", false, "connect to a Redis Cluster and scan every primary")
	fs.StringVar(&o.prefix, "prefix", fencing.DefaultPrefix, "key prefix `P` of the Locker (fencing.WithPrefix)")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: fencekit %s %s\n\n", name, synopsis)
		fmt.Fprintln(w, "Flags:")
		fs.PrintDefaults()
		fmt.Fprintf(w, "\n%s", usage)
	}
	return fs, o
}

// parse parses args with fs, allowing flags after positional arguments ("show order-42
// --json") until "--", and returns the positional arguments. It prints help on stdout,
// or the error and help on stderr, and then returns ok false and the exit code.
func (c *cli) parse(fs *flag.FlagSet, args []string) (pos []string, code int, ok bool) {
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(c.stdout)
			fs.Usage()
			return nil, exitOK, false
		}
		if err != nil {
			fmt.Fprintf(c.stderr, "%s: %v\n", fs.Name(), err)
			fs.SetOutput(c.stderr)
			fs.Usage()
			return nil, exitUsage, false
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if len(rest) == 0 || (consumed > 0 && args[consumed-1] == "--") {
			return append(pos, rest...), exitOK, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usageError prints msg for fs's command and returns the usage exit code.
func (c *cli) usageError(fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(c.stderr, "%s: %s\nRun \"%s --help\" for usage.\n", fs.Name(), fmt.Sprintf(format, args...), fs.Name())
	return exitUsage
}

// fail prints err for command name and returns the error exit code.
func (c *cli) fail(name string, err error) int {
	fmt.Fprintf(c.stderr, "fencekit %s: %v\n", name, err)
	return exitError
}

// connect returns a client for the flags' server: a *redis.ClusterClient with --cluster,
// else a *redis.Client. The caller closes it.
func (c *cli) connect(o *common) (redis.UniversalClient, error) {
	if strings.ContainsAny(o.prefix, "{}") {
		return nil, fmt.Errorf("%w: prefix %q contains '{' or '}'", errUsage, o.prefix)
	}
	url := o.url
	if url == "" {
		url = c.getenv("REDIS_URL")
	}
	if url == "" {
		url = defaultURL
	}
	off := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if o.cluster {
		opt, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, fmt.Errorf("%w: -u: %v", errUsage, err)
		}
		opt.DisableIdentity = true
		opt.MaintNotificationsConfig = off
		opt.MaxRetries, opt.DialerRetries = fewRetries(opt.MaxRetries), fewRetries(opt.DialerRetries)
		return redis.NewClusterClient(opt), nil
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: -u: %v", errUsage, err)
	}
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = off
	opt.MaxRetries, opt.DialerRetries = fewRetries(opt.MaxRetries), fewRetries(opt.DialerRetries)
	return redis.NewClient(opt), nil
}

// fewRetries returns n, or 1 when the URL left it to go-redis's default (0): a command
// line tool should fail fast against a server that is down. The URL's max_retries and
// dialer_retries parameters override it.
func fewRetries(n int) int {
	if n == 0 {
		return 1
	}
	return n
}

// errUsage marks errors in the command line found after parsing.
var errUsage = errors.New("usage")

// newLocker returns the Locker through which a command reads and releases locks: on client,
// with the flags' prefix. The caller closes it (before the client).
func newLocker(client redis.UniversalClient, o *common) *fencing.Locker {
	return fencing.New(client, fencing.WithPrefix(o.prefix))
}

// failLocker reports err, an error of the Locker's, for fs's command: a usage error when it
// wraps fencing.ErrInvalid (a name the Locker refuses, such as one longer than
// fencing.MaxResourceLen), the error exit code otherwise.
func (c *cli) failLocker(fs *flag.FlagSet, err error) int {
	if errors.Is(err, fencing.ErrInvalid) {
		return c.usageError(fs, "%v", err)
	}
	return c.fail(strings.TrimPrefix(fs.Name(), "fencekit "), err)
}

// connectOrFail is connect with the error reported; ok is false when it failed.
func (c *cli) connectOrFail(fs *flag.FlagSet, o *common) (redis.UniversalClient, int, bool) {
	client, err := c.connect(o)
	if errors.Is(err, errUsage) {
		msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
		return nil, c.usageError(fs, "%s", msg), false
	}
	if err != nil {
		return nil, c.fail(strings.TrimPrefix(fs.Name(), "fencekit "), err), false
	}
	return client, exitOK, true
}
