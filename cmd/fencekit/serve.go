package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/fencekit/fencekit/dashboard"
)

const serveHelp = `Serves the operators' page of the locks under the prefix (package dashboard) on its own,
as a service that mounts dashboard.New shows it: the list of locks, a page at a time, with
each holder's token, label and lease left and each waiter's label and time waited; each
resource's detail, which refreshes on its own; force release (a button per holder, POST
only, refused from other sites' pages); and the JSON form of each (api/locks, api/lock).

It has no access control of its own. It listens on 127.0.0.1 by default; to listen
elsewhere, put it behind a proxy that authenticates, or give --read-only, which hides force
release. It prints the page's address, and stops on SIGINT or SIGTERM, letting the requests
under way finish (5 s at most). See docs/ops.md.

Example:
  fencekit serve -u redis://localhost:6379/0
  fencekit serve --cluster -u 'redis://10.0.0.1:7000?addr=10.0.0.2:7000' --addr 127.0.0.1:9090 --read-only
`

// shutdownTimeout bounds how long serve waits for the requests under way when it stops.
const shutdownTimeout = 5 * time.Second

func (c *cli) serve(ctx context.Context, args []string) int {
	fs, o := c.newServerFlags("serve", "[flags]", serveHelp)
	addr := fs.String("addr", "127.0.0.1:8080", "listen on `host:port` (port 0: any free port)")
	readOnly := fs.Bool("read-only", false, "hide force release (dashboard.ReadOnly)")
	match := fs.String("match", "*", "show only resources whose name matches `GLOB` (dashboard.WithMatch)")
	pageSize := fs.Int("page-size", dashboard.DefaultPageSize, "locks per page, about `N` (dashboard.WithPageSize)")
	refresh := fs.Duration("refresh", dashboard.DefaultRefresh, "the pages read Redis again every `D`; 0: never (dashboard.WithRefresh)")
	title := fs.String("title", dashboard.DefaultTitle, "the pages' `title`")
	pos, code, ok := c.parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(fs, "unexpected argument %q", pos[0])
	}
	opts := []dashboard.Option{dashboard.WithMatch(*match), dashboard.WithPageSize(*pageSize), dashboard.WithRefresh(*refresh), dashboard.WithTitle(*title)}
	if *readOnly {
		opts = append(opts, dashboard.ReadOnly())
	}
	client, code, ok := c.connectOrFail(fs, o)
	if !ok {
		return code
	}
	defer client.Close()
	locker := newLocker(client, o)
	defer locker.Close()
	h := dashboard.New(locker, opts...)
	if err := h.Err(); err != nil {
		return c.usageError(fs, "%v", err)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		return c.fail("serve", fmt.Errorf("cannot reach Redis: %w", err))
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return c.fail("serve", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	local := host
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		local = "127.0.0.1" // every address: this host's own is one
	}
	fmt.Fprintf(c.stdout, "Serving the locks under %q at http://%s/\n", o.prefix, net.JoinHostPort(local, port))
	if !*readOnly && !isLoopback(host) {
		fmt.Fprintf(c.stderr, "fencekit serve: warning: %s is reachable from other hosts and has no access control: whoever reaches it can force-release locks (give --read-only, or put it behind a proxy that authenticates)\n", ln.Addr())
	}

	select {
	case err = <-served:
		return c.fail("serve", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return c.fail("serve", fmt.Errorf("stopping: %w", err))
	}
	return exitOK
}

// isLoopback reports whether host, an IP address, is a loopback address.
func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
