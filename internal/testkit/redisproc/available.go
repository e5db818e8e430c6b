package redisproc

import (
	"os"
	"os/exec"
	"testing"
)

// EnvServer names the environment variable that chooses the server executable: a name
// looked up on PATH or a path, such as /opt/valkey/bin/valkey-server. Any server that takes
// redis-server's command line works (Valkey does). Tests run in their package's directory,
// so a path should be absolute. Default: redis-server, looked up on PATH.
const EnvServer = "FENCING_REDIS_SERVER"

// defaultBinary is the server executable when EnvServer is unset or empty.
const defaultBinary = "redis-server"

// binary returns the server executable to run: EnvServer's value, or redis-server.
func binary() string {
	if b := os.Getenv(EnvServer); b != "" {
		return b
	}
	return defaultBinary
}

// Available reports whether the server executable (see EnvServer) is found.
func Available() bool {
	_, err := exec.LookPath(binary())
	return err == nil
}

// Require skips t when redis-server is not found on PATH. When EnvServer names an
// executable that is not found, it fails t instead: a server asked for by name must not be
// skipped silently.
func Require(t testing.TB) {
	t.Helper()
	if Available() {
		return
	}
	if b := os.Getenv(EnvServer); b != "" {
		t.Fatalf("redisproc: %s=%q is not an executable (tests run in their package's directory: give an absolute path)", EnvServer, b)
		return
	}
	t.Skip("redis-server not found on PATH; install redis-server, or set " + EnvServer + ", to run fault tests")
}
