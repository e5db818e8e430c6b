package echofence

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/internal/redistest"
	"github.com/fencekit/fencekit/internal/seam"
)

// TestCommitScript runs commit.lua as the middleware sends it, in a pipeline, against each
// state of the record and the fence counter it can meet.
func TestCommitScript(t *testing.T) {
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
		write  bool
		want   commitReply // stored: the record that wins
		kept   int64       // the token of the record left in Redis, 0: none
	}{
		{"current token commits", "7", 0, 7, true, commitReply{mine: true}, 7},
		{"no counter (expired) commits", "", 0, 7, true, commitReply{mine: true}, 7},
		{"later acquisition refuses", "8", 0, 7, true, commitReply{}, 0},
		{"longer counter refuses", "10", 0, 9, true, commitReply{}, 0},
		{"shorter counter commits", "9", 0, 9, true, commitReply{mine: true}, 9},
		{"largest token", tokenMax, 0, 9223372036854775807, true, commitReply{mine: true}, 9223372036854775807},
		{"retry of the same commit", "7", 7, 7, true, commitReply{mine: true}, 7},
		{"a later record wins", "8", 8, 7, true, commitReply{stored: string(rec(8))}, 8},
		{"an earlier record is never replaced", "8", 7, 8, true, commitReply{stored: string(rec(7))}, 7},
		{"lost lock, nobody took over", "7", 0, 7, false, commitReply{free: true}, 0},
		{"lost lock, a later call runs", "8", 0, 7, false, commitReply{}, 0},
		{"lost lock, a later call committed", "8", 8, 7, false, commitReply{stored: string(rec(8))}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call := &seam.Call{GuardKey: r.Prefix + "{" + tc.name + "}:idem", FenceKey: r.Prefix + "{" + tc.name + "}:fence"}
			if tc.fence != "" {
				r.Client.Set(ctx, call.FenceKey, tc.fence, 0)
			}
			if tc.stored != 0 {
				r.Client.Set(ctx, call.GuardKey, rec(tc.stored), 0)
			}
			pipe := r.Client.Pipeline()
			cmd := commitCmd(ctx, pipe, call, tc.token, rec(tc.token), time.Hour, tc.write, false)
			_, _ = pipe.Exec(ctx)
			got, err := parseCommit(cmd)
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
			left, err := r.Client.Get(ctx, call.GuardKey).Result()
			switch {
			case tc.kept == 0 && !errors.Is(err, redis.Nil):
				t.Errorf("record %q left, want none", left)
			case tc.kept != 0 && left != string(rec(tc.kept)):
				t.Errorf("record %q, want the one of token %d", left, tc.kept)
			}
			if tc.kept == tc.token && tc.stored == 0 {
				if ttl := r.Client.PTTL(ctx, call.GuardKey).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
					t.Errorf("record TTL %v, want an hour", ttl)
				}
			}
		})
	}
}

// TestCommitScriptKeys checks that the script reads and writes only the two keys it is given
// (so that a Cluster routes it to the lock's slot), with the seam's names.
func TestCommitScriptKeys(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	call := &seam.Call{GuardKey: r.Prefix + "{k}:idem", FenceKey: r.Prefix + "{k}:fence"}
	pipe := r.Client.Pipeline()
	cmd := commitCmd(ctx, pipe, call, 1, []byte("1:1:200:0:0:"), time.Second, true, false)
	if args := cmd.Args(); args[0] != "eval" || args[2] != 2 || args[3] != call.GuardKey || args[4] != call.FenceKey {
		t.Fatalf("command %v: want EVAL with the record and the fence keys", args)
	}
	_, _ = pipe.Exec(ctx)
	if keys := r.Client.Keys(ctx, r.Prefix+"*").Val(); len(keys) != 1 || keys[0] != call.GuardKey {
		t.Fatalf("keys %q, want the record alone", keys)
	}
}

// TestCommitScriptBody checks that the body sent is commit.lua's code, every line of it.
func TestCommitScriptBody(t *testing.T) {
	t.Parallel()
	if strings.Contains(CommitScript, "--") || !strings.HasPrefix(CommitScript, "local token = ARGV[1]\n") ||
		strings.Count(commitSource, "redis.call") != strings.Count(CommitScript, "redis.call") {
		t.Fatalf("body sent:\n%s", CommitScript)
	}
}

// TestCommitCounterExpiry checks that the commit of a Locker whose tokens are floored at the
// server clock gives the key's counter the record's expiry, unless it has one already, and
// that without the floor the counter is left as it is.
func TestCommitCounterExpiry(t *testing.T) {
	t.Parallel()
	r := redistest.New(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		floored bool
		before  time.Duration // the counter's TTL before; 0: none
		want    func(time.Duration) bool
	}{
		{"floored", true, 0, func(d time.Duration) bool { return d > 59*time.Minute && d <= time.Hour }},
		{"floored, counter expiring already", true, time.Minute, func(d time.Duration) bool { return d > 0 && d <= time.Minute }},
		{"not floored", false, 0, func(d time.Duration) bool { return d == -1 }},
	} {
		call := &seam.Call{GuardKey: r.Prefix + "{" + tc.name + "}:idem", FenceKey: r.Prefix + "{" + tc.name + "}:fence"}
		r.Client.Set(ctx, call.FenceKey, "1", tc.before)
		pipe := r.Client.Pipeline()
		cmd := commitCmd(ctx, pipe, call, 1, []byte("1:1:200:0:0:"), time.Hour, true, tc.floored)
		_, _ = pipe.Exec(ctx)
		if err := cmd.Err(); err != nil {
			t.Fatal(err)
		}
		if ttl := r.Client.PTTL(ctx, call.FenceKey).Val(); !tc.want(ttl) {
			t.Errorf("%s: counter TTL %v", tc.name, ttl)
		}
	}
}
