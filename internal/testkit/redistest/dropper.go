package redistest

import (
	"context"
	"io"
	"net"
	"sync/atomic"
)

// ReplyDropper dials connections that, once armed, lose the reply to the next request that
// Match accepts: the request reaches the server, which runs it; the first bytes of its reply
// are read (so the server has answered at least its first command) and thrown away, and the
// connection is closed, as when the network fails between the two. go-redis then retries the
// request on a new connection. Give Dial to a client's options as their Dialer.
type ReplyDropper struct {
	Match   func(request []byte) bool
	Armed   atomic.Bool  // set to drop the next reply
	Dropped atomic.Int32 // the replies dropped so far
}

// Dial dials addr with a connection of the dropper.
func (d *ReplyDropper) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &dropConn{Conn: c, d: d}, nil
}

// dropConn is one connection of a ReplyDropper. go-redis uses a connection from one
// goroutine at a time.
type dropConn struct {
	net.Conn
	d       *ReplyDropper
	pending bool
}

func (c *dropConn) Write(p []byte) (int, error) {
	if c.d.Match(p) && c.d.Armed.CompareAndSwap(true, false) {
		c.pending = true
	}
	return c.Conn.Write(p)
}

func (c *dropConn) Read(p []byte) (int, error) {
	if !c.pending {
		return c.Conn.Read(p)
	}
	c.pending = false
	_, _ = c.Conn.Read(p) // the server has run the request
	_ = c.Conn.Close()
	c.d.Dropped.Add(1)
	return 0, io.EOF
}
