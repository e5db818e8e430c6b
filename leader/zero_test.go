package leader_test

import (
	"errors"
	"testing"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/leader"
)

// TestZeroValues calls every method of Elector on its zero value and on a nil pointer: each
// reports no leadership, with an error matching ErrInvalid where it returns one, and never
// panics; so does an Elector made with nothing.
func TestZeroValues(t *testing.T) {
	var nilElector *leader.Elector
	for name, e := range map[string]*leader.Elector{"Elector": {}, "(*Elector)(nil)": nilElector, "New(nil)": leader.New(nil, "r")} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if v := recover(); v != nil {
					t.Errorf("panicked: %v", v)
				}
			}()
			if err := e.Run(t.Context()); !errors.Is(err, fencing.ErrInvalid) {
				t.Errorf("Run: got %v, want ErrInvalid", err)
			}
			if err := e.IsLeader(t.Context()); !errors.Is(err, fencing.ErrInvalid) || !errors.Is(err, leader.ErrNotLeader) {
				t.Errorf("IsLeader: got %v, want ErrInvalid and ErrNotLeader", err)
			}
			if _, ok := e.Token(); ok {
				t.Error("Token reports a term")
			}
		})
	}
}
