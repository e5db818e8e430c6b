package errtext

import (
	"context"
	"errors"
	"testing"
)

func TestNew(t *testing.T) {
	notAcquired := errors.New("fencing: not acquired")
	invalid := errors.New("fencing: invalid argument")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"joined", New("asynqfence: ", `task "t"`, errors.Join(notAcquired, context.DeadlineExceeded)),
			`asynqfence: task "t": not acquired: context deadline exceeded`},
		{"sentinel", New("fencemw: ", "nil Locker", invalid), "fencemw: nil Locker: invalid argument"},
		{"nested", New("fencemw: ", "Locker", errors.New(`fencing: release "r": fencing: not held`)),
			`fencemw: Locker: release "r": not held`},
		{"nil skipped", New("store: ", "write", nil), "store: write"},
		{"last part kept", New("store: ", "x", errors.New("a: store")), "store: x: a: store"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	err := New("asynqfence: ", "x", errors.Join(notAcquired, context.Canceled), invalid)
	for _, target := range []error{notAcquired, context.Canceled, invalid} {
		if !errors.Is(err, target) {
			t.Errorf("%v does not match %v", err, target)
		}
	}
}
