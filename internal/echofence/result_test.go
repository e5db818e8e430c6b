package echofence

import (
	"errors"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/fencekit/fencekit/internal/wire"
)

// TestResult reads what won for a key in each state of the record and the fence counter that
// a request whose record was not written can meet.
func TestResult(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
	l := fencing.New(r.Client, fencing.WithPrefix(r.Prefix))
	t.Cleanup(func() { _ = l.Close() })
	rec := func(token int64) []byte {
		return (&record{token: token, status: 201, fingerprint: "fp", body: []byte("body " + strconv.FormatInt(token, 10))}).encode()
	}
	const tokenMax = "9223372036854775807"
	for _, tc := range []struct {
		name   string
		fence  string // "" : no counter
		stored int64  // 0: no record
		token  int64
		want   resultReply
	}{
		{"nobody took over", "7", 0, 7, resultReply{free: true}},
		{"no counter (expired)", "", 0, 7, resultReply{free: true}},
		{"a later call runs", "8", 0, 7, resultReply{}},
		{"a longer counter is later", "10", 0, 9, resultReply{}},
		{"a shorter counter is earlier", "9", 0, 10, resultReply{free: true}},
		{"largest token", tokenMax, 0, 9223372036854775807, resultReply{free: true}},
		{"a lost reply's release committed", "7", 7, 7, resultReply{mine: true}},
		{"a later call committed", "8", 8, 7, resultReply{stored: string(rec(8))}},
		{"an earlier record", "8", 7, 8, resultReply{stored: string(rec(7))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := wire.For(r.Prefix, tc.name)
			if tc.fence != "" {
				r.Client.Set(ctx, k.Fence, tc.fence, 0)
			}
			if tc.stored != 0 {
				r.Client.Set(ctx, k.Memo(RecordName), rec(tc.stored), 0)
			}
			got, err := wonFor(ctx, l, tc.name, tc.token)
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
			// It only reads.
			left, err := r.Client.Get(ctx, k.Memo(RecordName)).Result()
			switch {
			case tc.stored == 0 && !errors.Is(err, redis.Nil):
				t.Errorf("record %q written, want none", left)
			case tc.stored != 0 && left != string(rec(tc.stored)):
				t.Errorf("record %q, want the one of token %d", left, tc.stored)
			}
			if fence := r.Client.Get(ctx, k.Fence).Val(); fence != tc.fence {
				t.Errorf("counter %q, want %q", fence, tc.fence)
			}
		})
	}
}
