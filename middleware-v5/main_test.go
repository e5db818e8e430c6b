package middleware

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: the middleware starts none of
// its own, and the renewal goroutines of Locker.Do must end with each request.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
