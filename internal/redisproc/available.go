package redisproc

import (
	"os/exec"
	"testing"
)

// binary is the server executable looked up on PATH.
const binary = "redis-server"

// Available reports whether redis-server is found on PATH.
func Available() bool {
	_, err := exec.LookPath(binary)
	return err == nil
}

// Require skips t when redis-server is not found on PATH.
func Require(t testing.TB) {
	t.Helper()
	if !Available() {
		t.Skip("redis-server not found on PATH; install redis-server to run fault tests")
	}
}
