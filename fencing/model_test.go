package fencing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"
)

// The model test runs random sequences of TryAcquire, Release, Extend, TTL, expiry
// (miniredis FastForward), SCRIPT FLUSH and, with the time floor, the loss of every key,
// by two Lockers on three resources, and compares each result with a model of the lock.
//
// Properties checked after every step:
//   - at most one acquisition holds a resource, and Redis holds exactly the model's holder
//     with the model's token; the fence counter equals the last token issued;
//   - tokens strictly increase per resource (also across the loss of every key when the
//     time floor is on);
//   - Release, Extend and TTL return ErrNotHeld exactly when the model says the
//     acquisition does not hold the lock, and then change nothing in Redis;
//   - TryAcquire fails with ErrNotAcquired, and RetryAfter reports the holder's remaining
//     TTL, exactly when the model has a live holder.
//
// TTLs are at least 2 s of real time, so the local validity check that TryAcquire makes
// on the reply never fires; expiry happens only through FastForward.

// modelResources are the resources the model uses, one of them needing the encoded layout.
var modelResources = []string{"a", "b", "{c}"}

type modelHandle struct {
	lock     *Lock
	resource string
}

type modelState struct {
	holder  int           // index of the holding handle, or -1
	expires time.Duration // model time at which the holder's lease ends
	last    int64         // last token issued
}

type lockModel struct {
	ctx     context.Context
	mini    *miniredis.Miniredis
	client  *redis.Client
	lockers [2]*Locker
	prefix  string
	floor   bool

	now     time.Duration
	res     map[string]*modelState
	handles []modelHandle
}

// held returns the live holder of resource, or -1, dropping an expired one.
func (m *lockModel) held(resource string) int {
	s := m.res[resource]
	if s.holder >= 0 && m.now >= s.expires {
		s.holder = -1
	}
	return s.holder
}

// snapshot returns what Redis holds for resource: lock value, its PTTL and the counter.
func (m *lockModel) snapshot(t *rapid.T, resource string) string {
	k := resourceKeys(m.prefix, resource)
	v, err := m.client.Get(m.ctx, k.lock).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("GET %s: %v", k.lock, err)
	}
	pttl := m.client.PTTL(m.ctx, k.lock).Val()
	fence := m.client.Get(m.ctx, k.fence).Val()
	return fmt.Sprintf("lock=%q pttl=%v fence=%q", v, pttl, fence)
}

func (m *lockModel) pickTTL(t *rapid.T) time.Duration {
	return time.Duration(rapid.IntRange(2000, 60000).Draw(t, "ttl_ms")) * time.Millisecond
}

func (m *lockModel) pickHandle(t *rapid.T) (int, bool) {
	if len(m.handles) == 0 {
		return 0, false
	}
	return rapid.IntRange(0, len(m.handles)-1).Draw(t, "handle"), true
}

func (m *lockModel) acquire(t *rapid.T) {
	resource := rapid.SampledFrom(modelResources).Draw(t, "resource")
	l := m.lockers[rapid.IntRange(0, 1).Draw(t, "locker")]
	ttl := m.pickTTL(t)
	s := m.res[resource]
	holder := m.held(resource)
	lock, err := l.TryAcquire(m.ctx, resource, WithTTL(ttl))
	if holder >= 0 {
		if !errors.Is(err, ErrNotAcquired) || lock != nil {
			t.Fatalf("TryAcquire(%s) held by handle %d: got %v, %v; want ErrNotAcquired", resource, holder, lock, err)
		}
		if d, ok := RetryAfter(err); !ok || d != s.expires-m.now {
			t.Fatalf("RetryAfter: got %v %v, want %v", d, ok, s.expires-m.now)
		}
		return
	}
	if err != nil {
		t.Fatalf("TryAcquire(%s) on a free resource: %v", resource, err)
	}
	if lock.Token() <= s.last {
		t.Fatalf("TryAcquire(%s): token %d after %d", resource, lock.Token(), s.last)
	}
	s.last, s.holder, s.expires = lock.Token(), len(m.handles), m.now+ttl
	m.handles = append(m.handles, modelHandle{lock: lock, resource: resource})
}

// nonOwner runs op for a handle that does not hold its lock and checks that it returns
// ErrNotHeld and leaves Redis unchanged.
func (m *lockModel) nonOwner(t *rapid.T, h modelHandle, name string, op func() error) {
	before := m.snapshot(t, h.resource)
	if err := op(); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("%s by a non-holder of %s: got %v, want ErrNotHeld", name, h.resource, err)
	}
	if after := m.snapshot(t, h.resource); after != before {
		t.Fatalf("%s by a non-holder changed %s: %s -> %s", name, h.resource, before, after)
	}
}

func (m *lockModel) release(t *rapid.T) {
	i, ok := m.pickHandle(t)
	if !ok {
		t.Skip("no acquisition yet")
	}
	h := m.handles[i]
	if m.held(h.resource) != i {
		m.nonOwner(t, h, "Release", func() error { return h.lock.Release(m.ctx) })
		return
	}
	if err := h.lock.Release(m.ctx); err != nil {
		t.Fatalf("Release by the holder of %s: %v", h.resource, err)
	}
	m.res[h.resource].holder = -1
}

func (m *lockModel) extend(t *rapid.T) {
	i, ok := m.pickHandle(t)
	if !ok {
		t.Skip("no acquisition yet")
	}
	h := m.handles[i]
	ttl := m.pickTTL(t)
	if m.held(h.resource) != i {
		m.nonOwner(t, h, "Extend", func() error { return h.lock.Extend(m.ctx, ttl) })
		return
	}
	if err := h.lock.Extend(m.ctx, ttl); err != nil {
		t.Fatalf("Extend by the holder of %s: %v", h.resource, err)
	}
	m.res[h.resource].expires = m.now + ttl
}

func (m *lockModel) ttl(t *rapid.T) {
	i, ok := m.pickHandle(t)
	if !ok {
		t.Skip("no acquisition yet")
	}
	h := m.handles[i]
	if m.held(h.resource) != i {
		m.nonOwner(t, h, "TTL", func() error { _, err := h.lock.TTL(m.ctx); return err })
		return
	}
	got, err := h.lock.TTL(m.ctx)
	if want := m.res[h.resource].expires - m.now; err != nil || got != want {
		t.Fatalf("TTL by the holder of %s: got %v, %v; want %v", h.resource, got, err, want)
	}
}

func (m *lockModel) advance(t *rapid.T) {
	d := time.Duration(rapid.IntRange(0, 70000).Draw(t, "advance_ms")) * time.Millisecond
	m.mini.FastForward(d)
	m.now += d
}

func (m *lockModel) scriptFlush(t *rapid.T) {
	if err := m.client.ScriptFlush(m.ctx).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
}

// loseEverything empties the server, as a restart without persistence does. Only with
// the time floor, which must keep tokens increasing through it.
func (m *lockModel) loseEverything(t *rapid.T) {
	if !m.floor {
		t.Skip("counter loss is modelled only with the time floor")
	}
	m.mini.FlushAll()
	for _, s := range m.res {
		s.holder = -1 // the tokens issued so far stay in s.last: the next must be higher
	}
}

// check compares Redis with the model for every resource, in one round trip.
func (m *lockModel) check(t *rapid.T) {
	type reply struct {
		lock, fence *redis.StringCmd
		pttl        *redis.DurationCmd
	}
	replies := make([]reply, len(modelResources))
	pipe := m.client.Pipeline()
	for i, resource := range modelResources {
		k := resourceKeys(m.prefix, resource)
		replies[i] = reply{pipe.Get(m.ctx, k.lock), pipe.Get(m.ctx, k.fence), pipe.PTTL(m.ctx, k.lock)}
	}
	if _, err := pipe.Exec(m.ctx); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("check: %v", err)
	}
	for i, resource := range modelResources {
		s, r := m.res[resource], replies[i]
		holder := m.held(resource)
		v, err := r.lock.Result()
		switch {
		case holder < 0 && !errors.Is(err, redis.Nil):
			t.Fatalf("%s: Redis holds %q (%v), the model holds nothing", resource, v, err)
		case holder >= 0 && err != nil:
			t.Fatalf("%s: Redis holds nothing (%v), the model holds handle %d", resource, err, holder)
		case holder >= 0:
			want := m.handles[holder].lock.value
			if !strings.HasSuffix(want, ":"+strconv.FormatInt(s.last, 10)) {
				t.Fatalf("%s: the model's holder has %q, its last token is %d", resource, want, s.last)
			}
			if v != want {
				t.Fatalf("%s: Redis holds %q, the model %q", resource, v, want)
			}
			if pttl := r.pttl.Val(); pttl != s.expires-m.now {
				t.Fatalf("%s: PTTL %v, the model %v", resource, pttl, s.expires-m.now)
			}
		}
		if s.last > 0 && !m.floor {
			if f := r.fence.Val(); f != strconv.FormatInt(s.last, 10) {
				t.Fatalf("%s: fence %s, last token %d", resource, f, s.last)
			}
		}
	}
}

func TestLockModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mini := miniredis.RunT(t)
		client := redis.NewClient(&redis.Options{Addr: mini.Addr(), DisableIdentity: true})
		t.Cleanup(func() { _ = client.Close() })
		m := &lockModel{
			ctx:    context.Background(),
			mini:   mini,
			client: client,
			prefix: "model:",
			floor:  rapid.Bool().Draw(t, "time_floor"),
			res:    make(map[string]*modelState),
		}
		opts := []Option{WithPrefix(m.prefix)}
		if m.floor {
			opts = append(opts, WithServerTimeFloor())
		}
		for i := range m.lockers {
			m.lockers[i] = New(client, opts...)
			t.Cleanup(func() { _ = m.lockers[i].Close() })
		}
		for _, r := range modelResources {
			m.res[r] = &modelState{holder: -1}
		}
		t.Repeat(map[string]func(*rapid.T){
			"acquire":     m.acquire,
			"release":     m.release,
			"extend":      m.extend,
			"ttl":         m.ttl,
			"advance":     m.advance,
			"scriptFlush": m.scriptFlush,
			"lose":        m.loseEverything,
			"":            m.check,
		})
	})
}
