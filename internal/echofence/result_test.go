package echofence

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/redistest"
	"github.com/fencekit/fencekit/internal/seam"
)

// TestResultScript runs result.lua as the middleware sends it against each
// state of the record and the fence counter a request whose commit was not written can meet.
func TestResultScript(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := t.Context()
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
			call := &seam.Call{GuardKey: r.Prefix + "{" + tc.name + "}:idem", FenceKey: r.Prefix + "{" + tc.name + "}:fence"}
			if tc.fence != "" {
				r.Client.Set(ctx, call.FenceKey, tc.fence, 0)
			}
			if tc.stored != 0 {
				r.Client.Set(ctx, call.GuardKey, rec(tc.stored), 0)
			}
			got, err := parseResult(resultCmd(ctx, r.Client, call, tc.token))
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
			// The script only reads.
			left, err := r.Client.Get(ctx, call.GuardKey).Result()
			switch {
			case tc.stored == 0 && !errors.Is(err, redis.Nil):
				t.Errorf("record %q written, want none", left)
			case tc.stored != 0 && left != string(rec(tc.stored)):
				t.Errorf("record %q, want the one of token %d", left, tc.stored)
			}
			if fence := r.Client.Get(ctx, call.FenceKey).Val(); fence != tc.fence {
				t.Errorf("counter %q, want %q", fence, tc.fence)
			}
		})
	}
}

// TestResultScriptKeys checks that the script is given only the two keys it reads (so that a
// Cluster routes it to the lock's slot), with the seam's names, and writes no key.
func TestResultScriptKeys(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	call := &seam.Call{GuardKey: r.Prefix + "{k}:idem", FenceKey: r.Prefix + "{k}:fence"}
	cmd := resultCmd(ctx, r.Client, call, 1)
	if args := cmd.Args(); args[2] != 2 || args[3] != call.GuardKey || args[4] != call.FenceKey {
		t.Fatalf("command %v: want the record and the fence keys", args)
	}
	if err := cmd.Err(); err != nil {
		t.Fatal(err)
	}
	if keys := r.Client.Keys(ctx, r.Prefix+"*").Val(); len(keys) != 0 {
		t.Fatalf("keys %q written, want none", keys)
	}
}
