package echofencetest

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// dropProxy forwards TCP connections to a Redis server. Armed with a marker, it forwards the
// next request that holds the marker, then drops the server's reply to it and closes the
// connection, as a network failure between the two would: the command ran, and the client
// does not know. Closed when the test ends.
type dropProxy struct {
	ln       net.Listener
	upstream string
	marker   atomic.Pointer[[]byte] // armed when set; cleared once a request holds it
	dropped  atomic.Int32

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

func newDropProxy(t testing.TB, upstream string) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, upstream: upstream}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr returns the address the proxy listens on.
func (p *dropProxy) Addr() string { return p.ln.Addr().String() }

// Arm makes the proxy drop the reply to the next request that holds marker.
func (p *dropProxy) Arm(marker string) {
	m := []byte(marker)
	p.marker.Store(&m)
}

func (p *dropProxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = down.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_, _ = down.Close(), up.Close()
			return
		}
		p.conns = append(p.conns, down, up)
		p.mu.Unlock()
		var drop atomic.Bool // this connection's next reply is dropped
		p.wg.Add(2)
		go p.requests(up, down, &drop)
		go p.replies(down, up, &drop)
	}
}

// requests copies the client's requests to the server, marking the connection's next reply
// to be dropped when a request holds the armed marker.
func (p *dropProxy) requests(up, down net.Conn, drop *atomic.Bool) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	var tail []byte // the end of the previous read, for a marker split between two
	for {
		n, err := down.Read(buf)
		if n > 0 {
			if m := p.marker.Load(); m != nil && bytes.Contains(append(tail, buf[:n]...), *m) && p.marker.CompareAndSwap(m, nil) {
				drop.Store(true)
			}
			if m := p.marker.Load(); m != nil {
				tail = append(tail[:0], buf[max(0, n-len(*m)):n]...)
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = up.Close()
			return
		}
	}
}

// replies copies the server's replies to the client, or drops one and cuts the connection.
func (p *dropProxy) replies(down, up net.Conn, drop *atomic.Bool) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 && drop.Load() {
			p.dropped.Add(1)
			_, _ = down.Close(), up.Close()
			return
		}
		if n > 0 {
			if _, werr := down.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = down.Close()
			return
		}
	}
}

func (p *dropProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
