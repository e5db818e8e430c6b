package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"
)

func TestRedis_Write_sequence(t *testing.T) {
	tests := append(commonSequences(), []markSequence{
		{"longer decimal is larger", []markStep{{9, false, 9}, {10, false, 10}, {9, true, 10}}},
		{"shorter decimal is smaller", []markStep{{100, false, 100}, {99, true, 100}, {20, true, 100}}},
		// As doubles, 2^53 and 2^53+1 are equal: a Lua-number comparison would admit.
		{"above 2^53", []markStep{{9007199254740993, false, 9007199254740993}, {9007199254740992, true, 9007199254740993}}},
		{"above 2^53 ascending", []markStep{{9007199254740992, false, 9007199254740992}, {9007199254740993, false, 9007199254740993}}},
		{"int64 max", []markStep{{math.MaxInt64 - 1, false, math.MaxInt64 - 1}, {math.MaxInt64, false, math.MaxInt64}, {math.MaxInt64, false, math.MaxInt64}, {math.MaxInt64 - 1, true, math.MaxInt64}, {1, true, math.MaxInt64}}},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := redistest.New(t)
			check := NewRedis(r.Client)
			key := r.Prefix + "rec"
			ctx := t.Context()
			for i, s := range tt.steps {
				value := fmt.Sprintf("v%d", i)
				err := check.Write(ctx, key, s.token, value)
				if s.wantStale {
					wantStale(t, err, key, s.token, s.wantMark)
				} else if err != nil {
					t.Errorf("step %d: Write(%d) = %v, want nil", i, s.token, err)
				}
				got, mark, err := check.Read(ctx, key)
				if err != nil {
					t.Fatalf("step %d: Read = %v", i, err)
				}
				if mark != s.wantMark {
					t.Errorf("step %d: mark = %d, want %d", i, mark, s.wantMark)
				}
				if !s.wantStale && got != value {
					t.Errorf("step %d: value = %q, want %q", i, got, value)
				}
				if s.wantStale && got == value {
					t.Errorf("step %d: stale value %q was written", i, got)
				}
			}
			// The mark is stored exactly, as a decimal string.
			last := tt.steps[len(tt.steps)-1].wantMark
			if got := r.Client.HGet(ctx, key, "fence").Val(); got != strconv.FormatInt(last, 10) {
				t.Errorf("fence field = %q, want %q", got, strconv.FormatInt(last, 10))
			}
		})
	}
}

func TestRedis_Read(t *testing.T) {
	r := redistest.New(t)
	check := NewRedis(r.Client)
	ctx := t.Context()
	key := r.Prefix + "rec"

	if _, _, err := check.Read(ctx, key); !errors.Is(err, ErrNotFound) {
		t.Errorf("Read of a missing record = %v, want ErrNotFound", err)
	}
	if err := check.Write(ctx, key, 7, ""); err != nil {
		t.Fatalf("Write = %v", err)
	}
	value, mark, err := check.Read(ctx, key)
	if err != nil || value != "" || mark != 7 {
		t.Errorf(`Read = %q, %d, %v; want "", 7, nil`, value, mark, err)
	}
	// Values are binary-safe.
	bin := "a\x00b\xff"
	if err := check.Write(ctx, key, 7, bin); err != nil {
		t.Fatalf("Write = %v", err)
	}
	if value, _, _ := check.Read(ctx, key); value != bin {
		t.Errorf("Read value = %q, want %q", value, bin)
	}
}

func TestRedis_foreignData(t *testing.T) {
	tests := []struct {
		name  string
		fence string // the fence field to plant; "" plants a string key instead
	}{
		{"string key", ""},
		{"non-numeric fence", "abc"},
		{"leading zero fence", "007"},
		{"negative fence", "-5"},
		{"fence above int64", "99999999999999999999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := redistest.New(t)
			check := NewRedis(r.Client)
			ctx := t.Context()
			key := r.Prefix + "rec"
			if tt.fence == "" {
				r.Client.Set(ctx, key, "x", 0)
			} else {
				r.Client.HSet(ctx, key, "fence", tt.fence)
			}
			if err := check.Write(ctx, key, 1, "v"); err == nil || errors.Is(err, ErrStaleToken) {
				t.Errorf("Write = %v, want a non-stale error", err)
			}
			if _, _, err := check.Read(ctx, key); err == nil || errors.Is(err, ErrNotFound) {
				t.Errorf("Read = %v, want an error other than ErrNotFound", err)
			}
			if got := r.Client.HGet(ctx, key, "value").Val(); got == "v" {
				t.Errorf("value was written over foreign data")
			}
		})
	}
}

func TestRedis_badInput(t *testing.T) {
	r := redistest.New(t)
	ctx := t.Context()
	key := r.Prefix + "rec"
	tests := []struct {
		name  string
		check *Redis
		key   string
		token int64
	}{
		{"empty key", NewRedis(r.Client), "", 1},
		{"zero token", NewRedis(r.Client), key, 0},
		{"negative token", NewRedis(r.Client), key, -1},
		{"min int64 token", NewRedis(r.Client), key, math.MinInt64},
		{"nil client", NewRedis(nil), key, 1},
		{"typed nil client", NewRedis((*redis.Client)(nil)), key, 1},
		{"typed nil cluster client", NewRedis((*redis.ClusterClient)(nil)), key, 1},
		{"nil *Redis", nil, key, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.check.Write(ctx, tt.key, tt.token, "v"); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrStaleToken) {
				t.Errorf("Write: got %v, want an error matching ErrInvalid", err)
			}
			if n := r.Client.Exists(ctx, key, "").Val(); n != 0 {
				t.Errorf("keys written: got %d, want 0", n)
			}
			if tt.token > 0 {
				if _, _, err := tt.check.Read(ctx, tt.key); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) {
					t.Errorf("Read: got %v, want an error matching ErrInvalid", err)
				}
			}
		})
	}
}

func TestRedis_transportError(t *testing.T) {
	r := redistest.New(t)
	if r.Mini == nil {
		t.Skip("needs miniredis to inject the error")
	}
	check := NewRedis(r.Client)
	key := r.Prefix + "rec"
	r.Mini.SetError("LOADING Redis is loading the dataset in memory")
	err := check.Write(t.Context(), key, 1, "v")
	r.Mini.SetError("")
	if err == nil || errors.Is(err, ErrStaleToken) {
		t.Errorf("Write = %v, want a non-stale error", err)
	}
	if _, _, err := check.Read(t.Context(), key); !errors.Is(err, ErrNotFound) {
		t.Errorf("Read after a failed Write = %v, want ErrNotFound", err)
	}
}

// TestRedis_Write_model checks Write against the obvious model (admit iff token >=
// mark) on random sequences of tokens, drawn to hit decimal-length boundaries, 2^53
// and int64 max.
func TestRedis_Write_model(t *testing.T) {
	r := redistest.New(t)
	check := NewRedis(r.Client)
	var seq atomic.Int64
	near := []int64{1, 9, 10, 99, 100, 999999999, 1 << 53, 1<<53 + 1, math.MaxInt64 - 1, math.MaxInt64}
	token := rapid.OneOf(
		rapid.Int64Range(1, math.MaxInt64),
		rapid.Int64Range(1, 1000),
		rapid.Custom(func(rt *rapid.T) int64 {
			n := rapid.SampledFrom(near).Draw(rt, "near")
			d := rapid.Int64Range(-2, 2).Draw(rt, "delta")
			if (d > 0 && n > math.MaxInt64-d) || n+d < 1 {
				return n
			}
			return n + d
		}),
	)
	rapid.Check(t, func(rt *rapid.T) {
		key := fmt.Sprintf("%smodel:%d", r.Prefix, seq.Add(1))
		var mark int64
		for i, tok := range rapid.SliceOfN(token, 1, 20).Draw(rt, "tokens") {
			err := check.Write(t.Context(), key, tok, strconv.Itoa(i))
			switch {
			case tok >= mark && err != nil:
				rt.Fatalf("Write(%d) over mark %d = %v, want nil", tok, mark, err)
			case tok < mark && !errors.Is(err, ErrStaleToken):
				rt.Fatalf("Write(%d) under mark %d = %v, want ErrStaleToken", tok, mark, err)
			case tok >= mark:
				mark = tok
			}
			if _, got, err := check.Read(t.Context(), key); err != nil || got != mark {
				rt.Fatalf("Read mark = %d, %v; want %d", got, err, mark)
			}
		}
	})
}

func TestRedis_Write_concurrent(t *testing.T) {
	const n = 150
	r := redistest.New(t)
	check := NewRedis(r.Client)
	ctx := t.Context()
	key := r.Prefix + "rec"

	type result struct {
		err        error
		start, end time.Time
		markAfter  int64
	}
	ws := schedule(t, n)
	results := make([]result, len(ws))
	var wg sync.WaitGroup
	var readerErrs atomic.Int64
	done := make(chan struct{})
	// A reader polls the record meanwhile: the mark never goes down, and the value
	// always belongs to the mark.
	wg.Add(1)
	go func() {
		defer wg.Done()
		var last int64
		for {
			select {
			case <-done:
				return
			default:
			}
			value, mark, err := check.Read(ctx, key)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			var tok, id int64
			if _, serr := fmt.Sscanf(value, "%d/%d", &tok, &id); err != nil || serr != nil || mark < last || tok != mark {
				t.Errorf("reader: got %q, mark %d, %v after mark %d", value, mark, err, last)
				readerErrs.Add(1)
				return
			}
			last = mark
		}
	}()
	var writers sync.WaitGroup
	sem := make(chan struct{}, inFlight)
	for i, w := range ws {
		sem <- struct{}{}
		writers.Add(1)
		go func() {
			defer writers.Done()
			defer func() { <-sem }()
			res := &results[i]
			res.start = time.Now()
			res.err = check.Write(ctx, key, w.token, fmt.Sprintf("%d/%d", w.token, w.id))
			res.end = time.Now()
			if res.err == nil {
				_, res.markAfter, _ = check.Read(ctx, key)
			}
		}()
	}
	writers.Wait()
	close(done)
	wg.Wait()

	// Stale acceptances show in three ways: a write accepted after (in real time) an
	// accepted write with a higher token ended; a writer that reads back a mark below
	// its own accepted token; and a final state other than the highest token's.
	var accepted []int
	staleAccepted := 0
	for i, w := range ws {
		res := results[i]
		if res.err != nil {
			wantStale(t, res.err, key, w.token, n)
			continue
		}
		accepted = append(accepted, i)
		if res.markAfter < w.token {
			staleAccepted++
			t.Errorf("writer %d: mark %d after its accepted token %d", w.id, res.markAfter, w.token)
		}
	}
	slices.SortFunc(accepted, func(a, b int) int { return results[a].end.Compare(results[b].end) })
	var maxEnded int64
	j := 0
	byStart := slices.Clone(accepted)
	slices.SortFunc(byStart, func(a, b int) int { return results[a].start.Compare(results[b].start) })
	for _, i := range byStart {
		for ; j < len(accepted) && results[accepted[j]].end.Before(results[i].start); j++ {
			maxEnded = max(maxEnded, ws[accepted[j]].token)
		}
		if ws[i].token < maxEnded {
			staleAccepted++
			t.Errorf("writer %d: token %d accepted after token %d was", ws[i].id, ws[i].token, maxEnded)
		}
	}
	if staleAccepted != 0 {
		t.Errorf("stale writes accepted: got %d, want 0", staleAccepted)
	}
	value, mark, err := check.Read(ctx, key)
	if err != nil || mark != n {
		t.Fatalf("final Read = %q, %d, %v; want mark %d", value, mark, err, n)
	}
	var tok, id int
	if _, err := fmt.Sscanf(value, "%d/%d", &tok, &id); err != nil || tok != n {
		t.Errorf("final value %q, want one written with token %d", value, n)
	}
	if readerErrs.Load() != 0 {
		t.Errorf("reader saw inconsistent states")
	}
	t.Logf("%d writers: %d accepted, %d refused", len(ws), len(accepted), len(ws)-len(accepted))
}

// FuzzParseToken checks the token encoding: parseToken accepts exactly the strings
// strconv.FormatInt writes for non-negative int64 values, and round-trips them.
func FuzzParseToken(f *testing.F) {
	for _, s := range []string{
		"0", "1", "9", "10", "007", "-1", "+1", " 1", "1 ", "", "1e3", "0x10", "1.0",
		"9007199254740992", "9007199254740993", "9223372036854775807", "9223372036854775808",
		"-9223372036854775808", "99999999999999999999", "١",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseToken(s)
		canonical := false
		if w, perr := strconv.ParseInt(s, 10, 64); perr == nil && w >= 0 && strconv.FormatInt(w, 10) == s {
			canonical = true
		}
		switch {
		case canonical && (err != nil || strconv.FormatInt(v, 10) != s):
			t.Errorf("parseToken(%q) = %d, %v; want it to round-trip", s, v, err)
		case !canonical && err == nil:
			t.Errorf("parseToken(%q) = %d, nil; want an error", s, v)
		}
	})
}

// FuzzRedisCompare runs the write script on pairs of tokens: the second write is
// admitted exactly when its token is at least the first, for every int64 pair,
// including pairs that collide as doubles. It runs on miniredis, or on the real
// Redis named by FENCING_REDIS_ADDR.
func FuzzRedisCompare(f *testing.F) {
	for _, p := range [][2]int64{
		{1, 1}, {1, 2}, {2, 1}, {9, 10}, {10, 9}, {99, 100}, {100, 99}, {19, 2}, {2, 19},
		{9007199254740992, 9007199254740993}, {9007199254740993, 9007199254740992},
		{math.MaxInt64, math.MaxInt64 - 1}, {math.MaxInt64 - 1, math.MaxInt64},
		{math.MaxInt64, 1}, {1, math.MaxInt64}, {0, 1}, {-5, 3},
	} {
		f.Add(p[0], p[1])
	}
	r := redistest.New(f)
	check := NewRedis(r.Client)
	f.Fuzz(func(t *testing.T, a, b int64) {
		if a < 1 || b < 1 {
			// Invalid tokens are refused before Redis; keep the pair in range instead.
			a, b = a&math.MaxInt64|1, b&math.MaxInt64|1
		}
		ctx := context.Background()
		// Fuzzing workers are processes sharing a real Redis: a random key per run.
		key := fmt.Sprintf("%scmp:%x", r.Prefix, rand.Uint64())
		if err := check.Write(ctx, key, a, "a"); err != nil {
			t.Fatalf("Write(%d) = %v", a, err)
		}
		err := check.Write(ctx, key, b, "b")
		if b >= a && err != nil {
			t.Errorf("Write(%d) after %d = %v, want nil", b, a, err)
		}
		if b < a {
			wantStale(t, err, key, b, a)
		}
		_, mark, err := check.Read(ctx, key)
		if want := max(a, b); err != nil || mark != want {
			t.Errorf("mark = %d, %v; want %d", mark, err, want)
		}
	})
}
