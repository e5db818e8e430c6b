package fencing_test

import (
	"context"
	_ "embed"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/internal/wire"
)

// The scripts of the release before this one (main at b8da1aa, key layout 2, whose scripts
// were one per verb for every kind), as its Locker sent them: TestUpgradeFromPrevious runs
// them beside this version's on one server. The upgrade rule (docs/design.md, "Upgrades")
// promises that a release and the one before it share a Redis without refusing each other;
// each release keeps this test with the previous release's scripts.
var (
	//go:embed testdata/prev/acquire.lua
	prevAcquireSrc string
	//go:embed testdata/prev/release.lua
	prevReleaseSrc string
	//go:embed testdata/prev/extend.lua
	prevExtendSrc string
	//go:embed testdata/prev/ttl.lua
	prevTTLSrc string
)

// prevLocker sends the previous release's scripts, with its arguments, on r's keys.
type prevLocker struct {
	t *testing.T
	r *redistest.Redis
	n int
}

func (p *prevLocker) eval(src, resource string, args ...any) (any, error) {
	return p.r.Client.Eval(context.Background(), src, []string{wire.For(p.r.Prefix, resource).Lock}, args...).Result()
}

// acquire takes resource as kind ('x', 's' or 'l<n>') with the floor and expiry rules
// ('0'/'1', ms or '0'), or queues element: it returns the lock value taken ("" when not), and
// the script's reply.
func (p *prevLocker) acquire(resource, kind, element, floor, expiry string) (string, any) {
	p.t.Helper()
	p.n++
	owner := "prev" + strconv.Itoa(p.n)
	entry := ""
	if element != "" {
		entry = strconv.FormatInt(time.Now().UnixMilli(), 10)
	}
	res, err := p.eval(prevAcquireSrc, resource, owner, 60000, kind, element, entry, "P", floor, expiry)
	if err != nil {
		p.t.Fatalf("the previous acquire of %s (%s): %v", resource, kind, err)
	}
	if arr, ok := res.([]any); ok && arr[0] == int64(wire.Taken) {
		res = arr[1]
	}
	if token, ok := res.(string); ok {
		return owner + ":" + token, res
	}
	return "", res
}

// release releases value (kind: 'x', 's' or 'l<n>') and returns the script's reply.
func (p *prevLocker) release(resource, value, kind string) any {
	p.t.Helper()
	res, err := p.eval(prevReleaseSrc, resource, value, kind)
	if err != nil {
		p.t.Fatalf("the previous release of %s: %v", value, err)
	}
	return res
}

// extend extends value to a minute and reads its lease: whether both found it held.
func (p *prevLocker) extend(resource, value, kind string) bool {
	p.t.Helper()
	ext, err1 := p.eval(prevExtendSrc, resource, value, 60000, kind)
	ttl, err2 := p.eval(prevTTLSrc, resource, value, kind)
	if err1 != nil || err2 != nil {
		p.t.Fatalf("the previous extend and ttl of %s: %v, %v", value, err1, err2)
	}
	arr, _ := ttl.([]any)
	return ext == int64(wire.Taken) && len(arr) == 2 && arr[0] == int64(wire.Taken)
}

// tokenOf returns the token of a lock value.
func tokenOf(t *testing.T, value string) int64 {
	t.Helper()
	_, token, ok := wire.SplitValue(value)
	if !ok {
		t.Fatalf("no token in %q", value)
	}
	return token
}

// TestUpgradeFromPrevious runs the previous release's scripts and this version's on one
// server, on the same resources, for each kind: each version's holders block the other's as
// the kind says, grants pass from one version's release to the other's waiters (with a label,
// which the previous scripts do not read), each extends and reads the locks the other granted
// it, and tokens keep increasing, with the time floor and the counter's expiry too.
func TestUpgradeFromPrevious(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := func(t *testing.T, opts ...fencing.Option) (*redistest.Redis, *fencing.Locker, *prevLocker) {
		r := redistest.New(t)
		return r, newLocker(t, r, append([]fencing.Option{fencing.WithTTL(time.Minute)}, opts...)...), &prevLocker{t: t, r: r}
	}
	busy := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, fencing.ErrNotAcquired) {
			t.Errorf("%s: got %v, want ErrNotAcquired", what, err)
		}
	}
	for _, kind := range []struct {
		name, prev string
		opts       []fencing.CallOption
	}{
		{"exclusive", "x", nil},
		{"shared", "s", []fencing.CallOption{fencing.Shared()}},
		{"limit 2", "l2", []fencing.CallOption{fencing.WithLimit(2)}},
	} {
		t.Run(kind.name, func(t *testing.T) {
			r, l, prev := setup(t)
			k := wire.For(r.Prefix, "res")
			// The previous version holds; this one joins or is refused as the kind says.
			held, _ := prev.acquire("res", kind.prev, "", "0", "0")
			if tokenOf(t, held) != 1 {
				t.Fatalf("the previous acquire: %q, want token 1", held)
			}
			mine, err := l.TryAcquire(ctx, "res", kind.opts...)
			switch kind.prev {
			case "x":
				busy(t, "beside the previous exclusive holder", err)
			default:
				if err != nil || mine.Token() != 2 {
					t.Fatalf("beside the previous %s holder: %v, %v; want token 2", kind.name, mine, err)
				}
				if err := mine.Extend(ctx, time.Minute); err != nil {
					t.Errorf("Extend in the previous version's hash: %v", err)
				}
				if ttl, err := mine.TTL(ctx); err != nil || ttl <= 0 {
					t.Errorf("TTL in the previous version's hash: %v, %v", ttl, err)
				}
				if !prev.extend("res", held, kind.prev) {
					t.Errorf("the previous holder's extend beside this version's holder found it not held")
				}
				_, err := l.TryAcquire(ctx, "res", kind.opts...)
				if kind.prev == "l2" {
					busy(t, "a third slot of a limit of 2", err)
				} else if err != nil {
					t.Errorf("a third shared holder: %v", err)
				}
			}
			// This version waits (with a label) behind the previous holders; the previous
			// release grants it: an exclusive waiter behind the lock and the shared holders, a
			// slot behind two taken.
			wopts := []fencing.CallOption{fencing.WithLabel("task 7: a.b~c")} // exclusive, but a slot of a limit
			if kind.prev == "l2" {
				wopts = append(wopts, kind.opts...)
			}
			waiting := acquireAsync(t.Context(), l, "res", wopts...)
			waitFor(t, 5*time.Second, "this version's waiter to queue", func() bool { return queueLen(r, "res") == 1 })
			if mine != nil {
				if err := mine.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if kind.prev == "s" { // a third shared holder took a place above
				st, _ := l.Inspect(ctx, "res")
				for _, h := range st.Holders {
					if h.Token != tokenOf(t, held) {
						_ = l.ForceRelease(ctx, "res", h.Token)
					}
				}
			}
			if res := prev.release("res", held, kind.prev); res != int64(wire.Released) {
				t.Fatalf("the previous release: %v, want released", res)
			}
			got := recv(t, waiting, 5*time.Second, "this version's waiter")
			if got.err != nil {
				t.Fatalf("this version's waiter: %v", got.err)
			}
			if st, err := l.Inspect(ctx, "res"); err != nil || len(st.Holders) != 1 || st.Holders[0].Label != "task 7: a.b~c" || st.Holders[0].Token != got.lock.Token() {
				t.Fatalf("after the previous release: %+v, %v; want this version's labeled waiter holding", st, err)
			}
			if typ := r.Client.Type(ctx, k.Lock).Val(); (kind.prev != "l2") != (typ == "string") {
				t.Errorf("the labeled waiter was granted a %s", typ)
			}
			if err := got.lock.Extend(ctx, time.Minute); err != nil {
				t.Errorf("Extend of the grant the previous release made: %v", err)
			}
			// The previous version waits behind this version's holders (exclusive behind a lock
			// or shared holders, a slot behind two taken), and this version's release grants it.
			waitKind, element := "x", "prevroom.1.3000"
			var second *fencing.Lock
			if kind.prev == "l2" {
				waitKind, element = "l2", element+"l2"
				second = mustAcquire(t, l, "res", kind.opts...)
			}
			if _, res := prev.acquire("res", waitKind, element, "0", "0"); !strings.HasPrefix(toString(res), "[3") {
				t.Fatalf("the previous waiter's join: %v; want queued", res)
			}
			if err := got.lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
			st, err := l.Inspect(ctx, "res")
			i := slices.IndexFunc(st.Holders, func(h fencing.Holder) bool { return h.Owner == element })
			if err != nil || i < 0 || st.Holders[i].Token <= got.lock.Token() {
				t.Fatalf("after this version's release: %+v, %v; want the previous waiter holding above token %d", st, err, got.lock.Token())
			}
			granted := wire.Value(element, st.Holders[i].Token)
			if !prev.extend("res", granted, waitKind) {
				t.Errorf("the previous waiter's extend of what this version granted it found it not held")
			}
			if res := prev.release("res", granted, waitKind); res != int64(wire.Released) {
				t.Errorf("the previous waiter's release: %v", res)
			}
			if second != nil {
				_ = second.Release(ctx)
			}
		})
	}

	t.Run("counter expiry", func(t *testing.T) {
		// Tokens keep increasing when the two versions take turns with the floor and an
		// expiring counter, and with the counter alone after it.
		_, l, prev := setup(t, fencing.WithCounterExpiry(time.Hour))
		last := int64(0)
		for i := range 4 {
			var token int64
			if i%2 == 0 {
				held, _ := prev.acquire("res", "x", "", "1", "3600000")
				token = tokenOf(t, held)
				prev.release("res", held, "x")
			} else {
				lock := mustAcquire(t, l, "res")
				token = lock.Token()
				_ = lock.Release(ctx)
			}
			if token <= last {
				t.Fatalf("turn %d: token %d after %d", i, token, last)
			}
			last = token
		}
	})
}
