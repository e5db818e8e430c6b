package faults_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Re-executed as the lock holder of TestPausedHolder: run it and exit.
	if os.Getenv(holderEnv) != "" {
		os.Exit(holderMain())
	}
	// Re-executed as one process of TestTransfers.
	if os.Getenv(transferEnv) != "" {
		os.Exit(transferMain())
	}
	// Re-executed as one process of the shared-mode tests.
	if os.Getenv(sharedEnv) != "" {
		os.Exit(sharedChildMain())
	}
	goleak.VerifyTestMain(m)
}
