package store

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
)

func TestMemory_Write_sequence(t *testing.T) {
	tests := append(commonSequences(), []markSequence{
		{"gaps are fine", []markStep{{2, false, 2}, {100, false, 100}, {99, true, 100}}},
		{"int64 max", []markStep{{math.MaxInt64 - 1, false, math.MaxInt64 - 1}, {math.MaxInt64, false, math.MaxInt64}, {math.MaxInt64 - 1, true, math.MaxInt64}}},
		{"above 2^53", []markStep{{1<<53 + 1, false, 1<<53 + 1}, {1 << 53, true, 1<<53 + 1}}},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var m Memory
			var data int64
			for i, s := range tt.steps {
				ran := false
				err := m.Write("r", s.token, func() error { ran, data = true, s.token; return nil })
				if s.wantStale {
					wantStale(t, err, "r", s.token, s.wantMark)
					if ran {
						t.Errorf("step %d: fn ran for stale token %d", i, s.token)
					}
				} else if err != nil || !ran {
					t.Errorf("step %d: Write(%d) = %v, ran %v; want nil, true", i, s.token, err, ran)
				}
				if got := m.Mark("r"); got != s.wantMark {
					t.Errorf("step %d: Mark = %d, want %d", i, got, s.wantMark)
				}
			}
			if last := tt.steps[len(tt.steps)-1]; !last.wantStale && data != last.token {
				t.Errorf("data = %d, want %d", data, last.token)
			}
		})
	}
}

func TestMemory_Write_fnError(t *testing.T) {
	var m Memory
	if err := m.Write("r", 3, func() error { return nil }); err != nil {
		t.Fatalf("Write(3) = %v, want nil", err)
	}
	boom := errors.New("boom")
	if err := m.Write("r", 7, func() error { return boom }); !errors.Is(err, boom) || errors.Is(err, ErrStaleToken) {
		t.Errorf("Write(7) = %v, want the fn's error unchanged", err)
	}
	if got := m.Mark("r"); got != 3 {
		t.Errorf("Mark after a failed fn = %d, want 3 (unchanged)", got)
	}
	// A failed write does not block a lower, still admissible token.
	if err := m.Write("r", 5, func() error { return nil }); err != nil {
		t.Errorf("Write(5) after failed Write(7) = %v, want nil", err)
	}
}

func TestMemory_Write_panic(t *testing.T) {
	var m Memory
	func() {
		defer func() {
			if recover() == nil {
				t.Errorf("panic in fn was swallowed, want it to continue")
			}
		}()
		_ = m.Write("r", 4, func() error { panic("boom") })
	}()
	if got := m.Mark("r"); got != 0 {
		t.Errorf("Mark after a panicking fn = %d, want 0", got)
	}
	// The per-resource lock was released.
	if err := m.Write("r", 4, func() error { return nil }); err != nil {
		t.Errorf("Write after a panic = %v, want nil", err)
	}
}

func TestMemory_Admit(t *testing.T) {
	var m Memory
	for _, tok := range []int64{2, 2, 9} {
		if err := m.Admit("r", tok); err != nil {
			t.Fatalf("Admit(%d) = %v, want nil", tok, err)
		}
	}
	wantStale(t, m.Admit("r", 8), "r", 8, 9)
	wantStale(t, m.Write("r", 8, func() error { return nil }), "r", 8, 9)
	if got := m.Mark("r"); got != 9 {
		t.Errorf("Mark = %d, want 9", got)
	}
	if got := m.Mark("other"); got != 0 {
		t.Errorf("Mark(other) = %d, want 0", got)
	}
}

func TestMemory_badInput(t *testing.T) {
	ok := func() error { return nil }
	tests := []struct {
		name     string
		resource string
		token    int64
		fn       func() error
	}{
		{"empty resource", "", 1, ok},
		{"zero token", "r", 0, ok},
		{"negative token", "r", -1, ok},
		{"min int64 token", "r", math.MinInt64, ok},
		{"nil fn", "r", 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Memory
			ran := false
			fn := tt.fn
			if fn != nil {
				fn = func() error { ran = true; return nil }
			}
			err := m.Write(tt.resource, tt.token, fn)
			if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrStaleToken) {
				t.Errorf("Write: got %v, want an error matching ErrInvalid", err)
			}
			if ran {
				t.Errorf("fn ran, want not")
			}
			if tt.fn != nil {
				if err := m.Admit(tt.resource, tt.token); !errors.Is(err, ErrInvalid) || errors.Is(err, ErrStaleToken) {
					t.Errorf("Admit: got %v, want an error matching ErrInvalid", err)
				}
			}
			if got := m.Mark(tt.resource); got != 0 {
				t.Errorf("Mark = %d, want 0 (nothing recorded)", got)
			}
		})
	}
	var nilM *Memory
	if err := nilM.Write("r", 1, ok); !errors.Is(err, ErrInvalid) {
		t.Errorf("(*Memory)(nil).Write: got %v, want an error matching ErrInvalid", err)
	}
	if err := nilM.Admit("r", 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("(*Memory)(nil).Admit: got %v, want an error matching ErrInvalid", err)
	}
	if got := nilM.Mark("r"); got != 0 {
		t.Errorf("(*Memory)(nil).Mark = %d, want 0", got)
	}
}

func TestMemory_Write_concurrent(t *testing.T) {
	const n = 200
	var m Memory
	// The guarded state: only ever touched inside fn, so under m's lock for "r".
	var (
		history []int64
		value   string
	)
	ws := schedule(t, n)
	// An extra writer holds the highest token but its write fails: the mark must not move.
	ws = append(ws, writer{id: len(ws), token: n + 1})
	errFail := errors.New("write failed")
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.Write("r", w.token, func() error {
				if w.token == n+1 {
					return errFail
				}
				history = append(history, w.token)
				value = fmt.Sprintf("%d/%d", w.token, w.id)
				return nil
			})
		}()
	}
	// Another resource, written meanwhile, must not interfere.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for tok := int64(1); tok <= n; tok++ {
			if err := m.Admit("other", tok); err != nil {
				t.Errorf("Admit(other, %d) = %v, want nil", tok, err)
			}
		}
	}()
	wg.Wait()

	accepted, staleAccepted := 0, 0
	for i, w := range ws {
		switch err := errs[i]; {
		case w.token == n+1:
			if !errors.Is(err, errFail) && !errors.Is(err, ErrStaleToken) {
				t.Errorf("failing writer: got %v, want its own error", err)
			}
		case err == nil:
			accepted++
		default:
			wantStale(t, err, "r", w.token, n)
		}
	}
	for i := 1; i < len(history); i++ {
		if history[i] < history[i-1] {
			staleAccepted++
		}
	}
	if staleAccepted != 0 {
		t.Errorf("stale writes accepted: got %d, want 0 (history %v)", staleAccepted, history)
	}
	if len(history) != accepted {
		t.Errorf("writes applied: got %d, want %d (every accepted write)", len(history), accepted)
	}
	if got := m.Mark("r"); got != n {
		t.Errorf("Mark = %d, want %d", got, n)
	}
	var tok, id int
	if _, err := fmt.Sscanf(value, "%d/%d", &tok, &id); err != nil || tok != n {
		t.Errorf("final value %q, want one written with token %d", value, n)
	}
	if got := m.Mark("other"); got != n {
		t.Errorf("Mark(other) = %d, want %d", got, n)
	}
	t.Logf("%d writers: %d accepted, %d refused", len(ws), accepted, len(ws)-accepted)
}
