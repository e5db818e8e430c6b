package bench_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sampleEvery is how often the connection sampler runs CLIENT LIST on every primary.
const sampleEvery = 100 * time.Millisecond

// A connKey names one TCP connection as CLIENT LIST shows it: addr, the client's end, and
// laddr, the server's.
type connKey struct{ client, server string }

// A connTracker knows which process opened each connection that is open now. The
// processes' clients dial through it (dialer), so that CLIENT LIST lines can be told apart:
// the benchmark's own INFO and CLIENT LIST connections, and any other client of the server,
// belong to no process. It is safe for concurrent use.
type connTracker struct {
	mu    sync.Mutex
	owner map[connKey]*trackedConn
}

func newConnTracker() *connTracker {
	return &connTracker{owner: make(map[connKey]*trackedConn)}
}

// A trackedConn is a connection opened by a process. It embeds *net.TCPConn, so it still
// satisfies syscall.Conn, which go-redis uses to check idle connections.
type trackedConn struct {
	*net.TCPConn
	tracker *connTracker
	key     connKey
	proc    int
}

// Close closes the connection and forgets it.
func (c *trackedConn) Close() error {
	c.tracker.mu.Lock()
	if c.tracker.owner[c.key] == c {
		delete(c.tracker.owner, c.key)
	}
	c.tracker.mu.Unlock()
	return c.TCPConn.Close()
}

// dialer returns a dialFunc for process proc's client: go-redis's default dialer, with
// every TCP connection it opens recorded as proc's until it is closed.
func (t *connTracker) dialer(proc int) dialFunc {
	dial := redis.NewDialer(&redis.Options{DialTimeout: 5 * time.Second})
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tcp, ok := conn.(*net.TCPConn)
		if !ok {
			return conn, nil // not TCP: not counted
		}
		c := &trackedConn{
			TCPConn: tcp,
			tracker: t,
			key:     connKey{client: tcp.LocalAddr().String(), server: tcp.RemoteAddr().String()},
			proc:    proc,
		}
		t.mu.Lock()
		t.owner[c.key] = c
		t.mu.Unlock()
		return c, nil
	}
}

// process returns the process that opened the connection key, if one did and it is open.
func (t *connTracker) process(key connKey) (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.owner[key]; ok {
		return c.proc, true
	}
	return 0, false
}

// connPeaks are the most connections the processes held at once, over the samples.
type connPeaks struct {
	// conns and pubsub are the peaks of all processes' connections together, and of those in
	// pub/sub mode, on all primaries together.
	conns, pubsub int
	// procConns and procPubsub are the same for the process that held the most.
	procConns, procPubsub int
}

// sampleConnections starts sampling the processes' connections on every primary of t, at
// once and then every sampleEvery, and returns a function that takes a last sample, stops
// the sampler and returns the peaks. A connection is in pub/sub mode when CLIENT LIST shows
// the P flag or a subscription (sub, psub or ssub above 0; ssub exists from Redis 7.0).
// Failures are reported with b.Errorf.
// processes must be at least 1.
func sampleConnections(b *testing.B, t *target, tr *connTracker, processes int) (stop func() connPeaks) {
	var peaks connPeaks
	procConns := make([]int, processes) // each process's peak
	procPubsub := make([]int, processes)
	sample := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conns := make([]int, processes)
		pubsub := make([]int, processes)
		for _, c := range t.primaries {
			list, err := c.ClientList(ctx).Result()
			if err != nil {
				b.Errorf("CLIENT LIST on %s: %v", c.Options().Addr, err)
				return
			}
			for line := range strings.Lines(list) {
				fields := clientFields(line)
				proc, ok := tr.process(connKey{client: fields["addr"], server: fields["laddr"]})
				if !ok {
					continue
				}
				conns[proc]++
				if inPubSub(fields) {
					pubsub[proc]++
				}
			}
		}
		var allConns, allPubsub int
		for p := range processes {
			allConns += conns[p]
			allPubsub += pubsub[p]
			procConns[p] = max(procConns[p], conns[p])
			procPubsub[p] = max(procPubsub[p], pubsub[p])
		}
		peaks.conns = max(peaks.conns, allConns)
		peaks.pubsub = max(peaks.pubsub, allPubsub)
	}

	quit, done := make(chan struct{}), make(chan struct{})
	sample()
	go func() {
		defer close(done)
		if t.callgrind != "" {
			// Under callgrind the samples would weigh on the instruction counts: the
			// first and the last only.
			<-quit
			return
		}
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	return func() connPeaks {
		close(quit)
		<-done
		sample()
		peaks.procConns = slices.Max(procConns)
		peaks.procPubsub = slices.Max(procPubsub)
		return peaks
	}
}

// clientFields splits one CLIENT LIST line into its name=value fields.
func clientFields(line string) map[string]string {
	fields := make(map[string]string)
	for f := range strings.FieldsSeq(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			fields[k] = v
		}
	}
	return fields
}

// inPubSub reports whether a CLIENT LIST line shows a connection in pub/sub mode.
func inPubSub(fields map[string]string) bool {
	if strings.Contains(fields["flags"], "P") {
		return true
	}
	for _, k := range []string{"sub", "psub", "ssub"} {
		if n, err := strconv.Atoi(fields[k]); err == nil && n > 0 {
			return true
		}
	}
	return false
}
