package echofencetest

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/echofence"
	"github.com/fencekit/fencekit/internal/testkit/redisproc"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
)

// idempotentLostCommitReply drops the reply to the release script that carries the commit,
// once: go-redis sends it again, and the retry finds the release's own outcome in its record
// (docs/design.md), so the client gets its answer, the record is the one of that request's
// token, written once, and no lock is left.
func idempotentLostCommitReply(t *testing.T, m Major) {
	v := newEnv(t, m)
	// The stored Location: only the release that commits the record sends it.
	drop := &redistest.ReplyDropper{Match: func(request []byte) bool { return bytes.Contains(request, []byte("/payments/1")) }}
	opts := v.r.Options()
	opts.Dialer = drop.Dial
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	l := fencing.New(c, fencing.WithPrefix(v.r.Prefix))
	t.Cleanup(func() { _ = l.Close() })
	v.e.Add(http.MethodPost, "/payments/:id", v.pay, v.imw(IdemConfig{Locker: l}))

	drop.Armed.Store(true)
	first := v.send(http.MethodPost, "/payments/1", "k", "a")
	if n := drop.Dropped.Load(); n != 1 {
		t.Fatalf("%d replies dropped, want 1", n)
	}
	p := first.payment(t)
	if first.status != http.StatusCreated || first.replayed() || p.Run != 1 {
		t.Fatalf("request whose commit reply was lost: got %d %q, want its own 201", first.status, first.body)
	}
	recs := v.records()
	if len(recs) != 1 {
		t.Fatalf("got records %q, want 1", recs)
	}
	stored := v.r.Client.Get(t.Context(), recs[0]).Val()
	if want := "1:" + strconv.FormatInt(p.Token, 10) + ":201:"; !strings.HasPrefix(stored, want) {
		t.Errorf("record %.40q, want it to start %q: the request's own token", stored, want)
	}
	check(t, "lock keys left", len(v.lockKeys()), 0)
	sameResponse(t, "retry", first, v.send(http.MethodPost, "/payments/1", "k", "a"))
	check(t, "handler runs", v.runs.Load(), 1)
}

// idempotentCluster runs the middleware on a real three-primary Redis Cluster: keys whose
// names need the core's brace encoding, a replay in one round trip without a lock, the
// record on the node of the key's lock, and concurrent retries that wait.
func idempotentCluster(t *testing.T, m Major) {
	redisproc.Require(t)
	cl := redisproc.StartCluster(t, 3)
	var trips redistest.Trips
	cc := cl.Client(t)
	cc.AddHook(&trips)
	const prefix = "idem:"
	l := fencing.New(cc, fencing.WithPrefix(prefix), fencing.WithRetryBackoff(time.Millisecond, 20*time.Millisecond))
	t.Cleanup(func() { _ = l.Close() })
	v := echoEnv(t, m, nil, l)
	v.e.Add(http.MethodPost, "/payments/:id", v.pay, v.imw(IdemConfig{MaxWait: 2 * time.Minute}))
	ctx := context.Background()
	if err := cc.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}

	for _, key := range []string{"order-1", "{", "}{", "a{b}c", "x:idem", "ünï", strings.Repeat("k", 255)} {
		first := v.send(http.MethodPost, "/payments/1", key, "a")
		if first.status != http.StatusCreated {
			t.Fatalf("key %.20q: got %d %q, want 201", key, first.status, first.body)
		}
		before := trips.Load()
		sameResponse(t, "retry of "+key, first, v.send(http.MethodPost, "/payments/1", key, "a"))
		if n := trips.Load() - before; n != 1 {
			t.Errorf("retry of %.20q: %d round trips, want 1", key, n)
		}
		// The record is beside the lock: on the node of the lock's slot.
		base := keyBase(prefix, echofence.IdempotencyName("", "/payments/:id", key))
		if n := cl.NodeFor(base+"lock").Do(ctx, "EXISTS", base+"idem").Val(); n != int64(1) {
			t.Errorf("key %.20q: no record %q on the node of the lock's slot", key, base+"idem")
		}
	}

	const n = 30
	before := v.runs.Load()
	replies := sendMany(n, func(int) reply { return v.send(http.MethodPost, "/payments/2", "together", "b") })
	for _, r := range replies {
		if r.status != http.StatusCreated || r.body != replies[0].body {
			t.Fatalf("concurrent retries: got %d %q, want every reply 201 %q", r.status, r.body, replies[0].body)
		}
	}
	check(t, "concurrent retries: handler runs", v.runs.Load()-before, 1)
}

// keyBase returns "<prefix>{R}:" for a resource R as fencing names its keys: R inside the
// hash tag, or its unpadded base64url with a ":b64" marker when R holds a brace
// (docs/design.md, "Key layout").
func keyBase(prefix, resource string) string {
	if strings.ContainsAny(resource, "{}") {
		return prefix + "{" + base64.RawURLEncoding.EncodeToString([]byte(resource)) + "}:b64:"
	}
	return prefix + "{" + resource + "}:"
}
