package faults_test

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// linkProxy forwards TCP connections to a server, and can cut them silently: after Cut,
// bytes in both directions are read and dropped, as in a network partition, while the
// connections stay open. Closed when the test ends.
type linkProxy struct {
	ln       net.Listener
	upstream string
	cut      atomic.Bool

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

func newLinkProxy(t *testing.T, upstream string) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{ln: ln, upstream: upstream}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Port returns the port the proxy listens on.
func (p *linkProxy) Port() string { return strconv.Itoa(p.ln.Addr().(*net.TCPAddr).Port) }

// Cut starts dropping all traffic.
func (p *linkProxy) Cut() { p.cut.Store(true) }

func (p *linkProxy) accept() {
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
		p.wg.Add(2)
		go p.pipe(up, down)
		go p.pipe(down, up)
	}
}

// pipe copies src to dst until either closes, dropping what it reads once the link is cut.
func (p *linkProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

func (p *linkProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
