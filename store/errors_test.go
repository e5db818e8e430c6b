package store

import (
	"errors"
	"fmt"
	"testing"
)

func TestStaleTokenError(t *testing.T) {
	var err error = &StaleTokenError{Resource: "order:7", Token: 5, Mark: 9}
	if !errors.Is(err, ErrStaleToken) {
		t.Errorf("errors.Is(%v, ErrStaleToken) = false, want true", err)
	}
	if errors.Is(err, ErrNotFound) {
		t.Errorf("errors.Is(%v, ErrNotFound) = true, want false", err)
	}
	wrapped := fmt.Errorf("saving order: %w", err)
	if !errors.Is(wrapped, ErrStaleToken) {
		t.Errorf("errors.Is(wrapped, ErrStaleToken) = false, want true")
	}
	var stale *StaleTokenError
	if !errors.As(wrapped, &stale) || stale.Token != 5 || stale.Mark != 9 || stale.Resource != "order:7" {
		t.Errorf("errors.As: got %+v, want {order:7 5 9}", stale)
	}
	const want = `store: stale fencing token 5 for "order:7" (high-water mark 9)`
	if got := err.Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// wantStale fails t unless err is a *StaleTokenError for token whose mark is above
// the token and at most maxMark, and returns the error's mark.
func wantStale(t testing.TB, err error, resource string, token, maxMark int64) int64 {
	t.Helper()
	var stale *StaleTokenError
	if !errors.As(err, &stale) {
		t.Errorf("token %d: got error %v, want a *StaleTokenError", token, err)
		return 0
	}
	if !errors.Is(err, ErrStaleToken) {
		t.Errorf("token %d: errors.Is(%v, ErrStaleToken) = false, want true", token, err)
	}
	if stale.Resource != resource || stale.Token != token || stale.Mark <= token || stale.Mark > maxMark {
		t.Errorf("got %+v, want Resource %q, Token %d and %d < Mark <= %d", stale, resource, token, token, maxMark)
	}
	return stale.Mark
}

// markStep is one write in a token sequence: the token, whether it must be refused as
// stale, and the high-water mark expected afterwards.
type markStep struct {
	token     int64
	wantStale bool
	wantMark  int64
}

// markSequence is a named sequence of writes to one record.
type markSequence struct {
	name  string
	steps []markStep
}

// commonSequences are the token sequences every store must handle alike; each store's test
// adds the cases particular to how it compares tokens.
func commonSequences() []markSequence {
	return []markSequence{
		{"fresh record admits any token", []markStep{{1, false, 1}}},
		{"higher token", []markStep{{3, false, 3}, {4, false, 4}}},
		{"equal token writes again", []markStep{{3, false, 3}, {3, false, 3}}},
		{"lower token refused", []markStep{{5, false, 5}, {4, true, 5}, {5, false, 5}}},
	}
}
