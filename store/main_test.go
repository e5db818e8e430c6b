package store

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine outlives the tests: the package starts none,
// and every test waits for the writers it starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
