package echofencetest

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
)

// busyRetryAfter sends five requests in a row, each waiting MaxWait, to a resource that
// another replica holds and renews with a 5 s lease, while a request of this replica waits on
// it all along, so this replica's Locker already listens on the resource: each 423's
// Retry-After is the holder's remaining lease when it was answered, within a second of the
// lease read from Redis right after it, not a value of the wait's start nor 1 for a Locker
// that skipped its first attempt.
func busyRetryAfter(t *testing.T, d Driver) {
	v := newEnv(t, d)
	other := fencing.New(v.r.Client, fencing.WithPrefix(v.r.Prefix)) // another replica's Locker
	t.Cleanup(func() { _ = other.Close() })
	const lease = 5 * time.Second
	ok := func(r Request) error { return r.NoContent(http.StatusNoContent) }
	v.e.Add(http.MethodPut, "/seats/:id", ok, v.mw(Config{Namespace: "event", MaxWait: 300 * time.Millisecond}))
	v.e.Add(http.MethodPost, "/holds/:id", ok, v.mw(Config{Namespace: "event", MaxWait: time.Minute}))

	holder, err := other.TryAcquire(t.Context(), echofence.Qualify("event", "7"), fencing.WithTTL(lease))
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan int, 1)
	go func() { waiting <- v.serve(http.MethodPost, "/holds/7").Code }()
	eventually(t, 10*time.Second, "the long request waiting in the queue", func() bool {
		st, err := v.locker.Inspect(context.Background(), echofence.Qualify("event", "7"))
		return err == nil && len(st.Waiters) == 1
	})

	for i := range 5 {
		if err := holder.Extend(t.Context(), lease); err != nil { // the holder renews
			t.Fatal(err)
		}
		rec := v.serve(http.MethodPut, "/seats/7")
		left, err := v.r.Client.PTTL(context.Background(), v.lockKeys()[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		ra, err := strconv.Atoi(rec.Header().Get("Retry-After"))
		if rec.Code != http.StatusLocked || err != nil {
			t.Fatalf("request %d: got %d with Retry-After %q, want 423 with a number", i+1, rec.Code, rec.Header().Get("Retry-After"))
		}
		// Retry-After rounds up the lease left when the answer was made; the lease read after
		// it can only be shorter.
		if d := time.Duration(ra)*time.Second - left; d < 0 || d > 2*time.Second {
			t.Errorf("request %d: Retry-After %d s with the holder's lease at %v, want it within a second of the lease",
				i+1, ra, left.Round(time.Millisecond))
		}
	}
	if err := holder.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code := recv(t, waiting, "the long request"); code != http.StatusNoContent {
		t.Errorf("the long request: got %d after the release, want 204", code)
	}
}
