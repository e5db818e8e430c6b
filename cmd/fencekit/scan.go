package main

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultScanCount is the COUNT hint of every SCAN call.
const defaultScanCount = 1000

// progress reports a scan's progress on stderr: nothing before the scan has run for
// every, then a line at most every interval, and a last line when it ends. It is safe for
// concurrent use.
type progress struct {
	w     io.Writer
	every time.Duration
	what  string // what is counted: "lock keys", "keys"

	mu      sync.Mutex
	start   time.Time
	last    time.Time
	batches int
	found   int
	total   int64 // keys in the databases scanned, from DBSIZE
	printed bool
}

func (c *cli) newProgress(what string) *progress {
	now := time.Now()
	return &progress{w: c.stderr, every: c.progressEvery, what: what, start: now, last: now}
}

// addTotal adds a node's DBSIZE to the keys the scan has to go through.
func (p *progress) addTotal(n int64) {
	p.mu.Lock()
	p.total += n
	p.mu.Unlock()
}

// add records one SCAN reply that brought found matching keys.
func (p *progress) add(found int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.batches++
	p.found += found
	now := time.Now()
	if now.Sub(p.last) < p.every {
		return
	}
	p.last, p.printed = now, true
	fmt.Fprintf(p.w, "fencekit: scanning: %d SCAN calls over %d keys, %d %s found, %s\n",
		p.batches, p.total, p.found, p.what, now.Sub(p.start).Round(100*time.Millisecond))
}

// done prints the last line if any was printed before.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.printed {
		fmt.Fprintf(p.w, "fencekit: scan done: %d SCAN calls, %d %s found, %s\n",
			p.batches, p.found, p.what, time.Since(p.start).Round(100*time.Millisecond))
	}
}

// transportError returns err unless it is a reply from Redis (redis.Nil included): a
// pipeline's Exec returns the first failed command's error, and a key of an unexpected
// type (WRONGTYPE) must not stop a whole scan. The commands' own results say what failed.
func transportError(err error) error {
	var reply redis.Error
	if err == nil || errors.As(err, &reply) {
		return nil
	}
	return err
}
