package middleware_test

import (
	"testing"

	"github.com/fencekit/fencekit/internal/echofence/echofencetest"
)

// TestBehaviour runs the behaviour suite that the Echo v5 package runs too.
func TestBehaviour(t *testing.T) {
	echofencetest.Run(t, echofencetest.V4())
}
