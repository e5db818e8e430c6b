package faults_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// evalPipeline matches the pipeline WithReplicas sends, EVAL of a script followed by WAIT,
// when the script's source holds header: "-- Take a resource exclusively" for the acquire script,
// "-- Reset, or read, the lease" for the extension that confirms a grant.
func evalPipeline(header string) func([]byte) bool {
	return func(p []byte) bool {
		return bytes.Contains(p, []byte("\r\n$4\r\neval\r\n")) && bytes.Contains(p, []byte(header)) &&
			bytes.Contains(p, []byte("\r\n$4\r\nwait\r\n"))
	}
}

// TestWithReplicasLostReply loses the reply to the pipeline of EVAL and WAIT that
// WithReplicas sends, for an acquisition and for the extension that confirms a grant from
// the queue; go-redis retries the pipeline on a new connection, where the retried script
// finds the lock already its own. With the only replica live, the call succeeds and the
// replica holds the lock; with it stopped (SIGSTOP), the call fails with ErrNotReplicated
// and holds nothing: a retry must not be acknowledged because its WAIT, on a connection
// that wrote nothing, had nothing to wait for.
func TestWithReplicasLostReply(t *testing.T) {
	redisproc.Require(t)
	t.Parallel()
	p := redisproc.Start(t)
	r := redisproc.Start(t, redisproc.ReplicaOf(p))
	waitReplicated(t, p, r)
	ctx := context.Background()
	dropping := func(d *redistest.ReplyDropper) *redis.Client {
		return p.Client(t, func(o *redis.Options) {
			o.MaxRetries = 3
			o.Dialer = d.Dial
		})
	}
	onReplica := func(t *testing.T, resource string) string {
		v, _ := r.Do(ctx, "GET", lockKey(t, resource)).Text()
		return v
	}
	const (
		liveTO    = 5 * time.Second // generous: a loaded machine can delay the acknowledgement
		stoppedTO = 300 * time.Millisecond
	)

	for _, stopped := range []bool{false, true} {
		state, timeout := "live", liveTO
		if stopped {
			state, timeout = "stopped", stoppedTO
		}

		t.Run("acquire/"+state, func(t *testing.T) {
			resource := "acquire-" + state
			if stopped {
				r.Pause()
				defer r.Resume()
			}
			d := &redistest.ReplyDropper{Match: evalPipeline("-- Take a resource exclusively")}
			l := newLocker(t, dropping(d), fencing.WithReplicas(1, timeout))
			d.Armed.Store(true)
			lock, err := l.TryAcquire(ctx, resource)
			if d.Dropped.Load() != 1 {
				t.Fatalf("the reply was not dropped (TryAcquire: %v)", err)
			}
			if v := p.Do(ctx, "GET", fenceKey(t, resource)).Val(); v != "1" {
				t.Errorf("fence counter %v, want 1: the retry issued no second token", v)
			}
			if stopped {
				if !errors.Is(err, fencing.ErrNotReplicated) || errors.Is(err, fencing.ErrNotAcquired) {
					t.Fatalf("got %v, %v; want ErrNotReplicated", lock, err)
				}
				if n := p.Do(ctx, "EXISTS", lockKey(t, resource)).Val(); n != int64(0) {
					t.Errorf("the unreplicated lock is still on the primary")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v := onReplica(t, resource); !strings.HasSuffix(v, ":1") {
				t.Errorf("the replica holds %q, want the lock with token 1", v)
			}
			if err := lock.Release(ctx); err != nil {
				t.Error(err)
			}
		})

		t.Run("grant/"+state, func(t *testing.T) {
			resource := "grant-" + state
			holder := newLocker(t, p.Client(t))
			held, err := holder.TryAcquire(ctx, resource)
			if err != nil {
				t.Fatal(err)
			}
			d := &redistest.ReplyDropper{Match: evalPipeline("-- Reset, or read, the lease")}
			waiter := newLocker(t, dropping(d), fencing.WithReplicas(1, timeout))
			type result struct {
				lock *fencing.Lock
				err  error
			}
			got := make(chan result, 1)
			go func() {
				actx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				lock, err := waiter.Acquire(actx, resource)
				got <- result{lock, err}
			}()
			waitUntil(t, 10*time.Second, "the waiter in the queue", func() bool {
				return p.Do(ctx, "LLEN", keyBase(t, resource)+"queue").Val() == int64(1)
			})
			if stopped {
				r.Pause()
				defer r.Resume()
			}
			d.Armed.Store(true)
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			a := <-got
			if d.Dropped.Load() != 1 {
				t.Fatalf("the reply was not dropped (Acquire: %v)", a.err)
			}
			if stopped {
				if !errors.Is(a.err, fencing.ErrNotReplicated) || errors.Is(a.err, fencing.ErrNotAcquired) {
					t.Fatalf("got %v, %v; want ErrNotReplicated", a.lock, a.err)
				}
				// The unacknowledged grant was passed on: nobody waits, so the lock is free.
				if n := p.Do(ctx, "EXISTS", lockKey(t, resource)).Val(); n != int64(0) {
					t.Errorf("the unreplicated grant is still held on the primary")
				}
				return
			}
			if a.err != nil {
				t.Fatal(a.err)
			}
			want := ":" + strconv.FormatInt(held.Token()+1, 10)
			if a.lock.Token() != held.Token()+1 || !strings.HasSuffix(strings.TrimSuffix(onReplica(t, resource), "+"), want) {
				t.Errorf("token %d, replica holds %q; want token %d there", a.lock.Token(), onReplica(t, resource), held.Token()+1)
			}
			if err := a.lock.Release(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}
