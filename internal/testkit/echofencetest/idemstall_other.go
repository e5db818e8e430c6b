//go:build !unix

package echofencetest

// stalledCases returns the suite's cases that stop a process: none without SIGSTOP.
func stalledCases() []testCase { return nil }
