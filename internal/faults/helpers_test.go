package faults_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
)

// figure logs a measurement in the format that `grep FIGURE` collects.
func figure(t testing.TB, name, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURE %s: %s", name, fmt.Sprintf(format, args...))
}

// waitUntil polls cond every few milliseconds until it holds, failing t after d.
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fencedStore is a store that checks fencing tokens: it accepts a write only with a token
// at least as high as the highest it has accepted (its mark). Safe for concurrent use.
type fencedStore struct {
	mu       sync.Mutex
	mark     int64
	accepted int
	rejected int
	// dupAccepted counts writes accepted with a token equal to the mark from a different
	// writer: two holders that were issued the same token.
	dupAccepted int
	markWriter  string
}

// write offers a write with token by writer and reports whether the store accepted it.
func (s *fencedStore) write(writer string, token int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.mark {
		s.rejected++
		return false
	}
	if token == s.mark && writer != s.markWriter {
		s.dupAccepted++
	}
	s.mark, s.markWriter = token, writer
	s.accepted++
	return true
}

// prefix returns a key prefix for a test.
func prefix(t testing.TB) string {
	return "fk:" + strings.NewReplacer("/", ":", " ", "_").Replace(t.Name()) + ":"
}

// newLocker returns a Locker for client, closed when t ends.
func newLocker(t testing.TB, client redis.UniversalClient, opts ...fencing.Option) *fencing.Locker {
	t.Helper()
	l := fencing.New(client, append([]fencing.Option{fencing.WithPrefix(prefix(t))}, opts...)...)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// lockKey and fenceKey return a resource's keys as the fencing package documents them.
func lockKey(t testing.TB, resource string) string  { return keyBase(t, resource) + "lock" }
func fenceKey(t testing.TB, resource string) string { return keyBase(t, resource) + "fence" }

func keyBase(t testing.TB, resource string) string {
	if strings.ContainsAny(resource, "{}") {
		return prefix(t) + "{" + b64(resource) + "}:b64:"
	}
	return prefix(t) + "{" + resource + "}:"
}

// lockerOptions returns call options as the options of a Locker, whose defaults they become.
func lockerOptions(opts []fencing.CallOption) []fencing.Option {
	out := make([]fencing.Option, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

// acquireRelease takes and frees resource n times and returns the last token.
func acquireRelease(t testing.TB, l *fencing.Locker, resource string, n int, opts ...fencing.CallOption) int64 {
	t.Helper()
	var last int64
	for i := range n {
		lock, err := l.TryAcquire(context.Background(), resource, opts...)
		if err != nil {
			t.Fatalf("acquisition %d of %s: %v", i, resource, err)
		}
		if lock.Token() <= last {
			t.Fatalf("token %d after %d", lock.Token(), last)
		}
		last = lock.Token()
		if err := lock.Release(context.Background()); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	return last
}

// info returns the fields of an INFO section of s.
func info(t testing.TB, s *redisproc.Server, section string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	text, err := s.Do(ctx, "INFO", section).Text()
	if err != nil {
		t.Fatalf("INFO %s on %s: %v", section, s.Addr(), err)
	}
	fields := make(map[string]string)
	for _, line := range strings.Split(text, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

// do runs one admin command on s and fails t on error.
func do(t testing.TB, s *redisproc.Server, args ...any) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := s.Do(ctx, args...).Result()
	if err != nil {
		t.Fatalf("%v on %s: %v", args, s.Addr(), err)
	}
	return v
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 0, 64) + "ms"
}

// mentions reports whether err's text contains s, such as a Redis error code.
func mentions(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
