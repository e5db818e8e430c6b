package echofencetest

import (
	"slices"
	"testing"

	"github.com/fencekit/fencekit/fencing"
)

// Run runs the whole suite against m, each case as a parallel subtest named after it.
func Run(t *testing.T, m Major) {
	for _, tc := range slices.Concat(cases(), stalledCases()) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, m)
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, m Major)
}

// cases returns the suite's cases but those that stop a process (stalledCases).
func cases() []testCase {
	return []testCase{
		{"TokenInContextAndHeader", tokenInContextAndHeader},
		{"BadKey", badKey},
		{"ExtractorStatusErrorPassesThrough", extractorStatusErrorPassesThrough},
		{"Busy", busy},
		{"BusyRetryAfter", busyRetryAfter},
		{"MaxWait", maxWait},
		{"Limit", limit},
		{"Unavailable", unavailable},
		{"Releases", releases},
		{"ReleasesOnDisconnect", releasesOnDisconnect},
		{"LockLostCancelsContext", lockLostCancelsContext},
		{"LostLock", lostLock},
		{"LostLockForReal", lostLockForReal},
		{"ConcurrentRequestsNeverOverlap", concurrentRequestsNeverOverlap},
		{"DifferentResourcesRunInParallel", differentResourcesRunInParallel},
		{"Namespaces", namespaces},
		{"RouteNames", routeNames},
		{"DefaultConfig", defaultConfig},
		{"SkipSafeMethods", skipSafeMethods},
		{"NestedOnSameResourceIsReentrant", nestedOnSameResourceIsReentrant},
		{"ContextKeyKeptForLoggers", contextKeyKeptForLoggers},
		{"GroupUnknownPath", groupUnknownPath},
		{"ToMiddleware", toMiddleware},
		{"Constants", constants},
		{"FenceWithConfigPanicsOnInvalidConfig", fenceWithConfigPanics},
		{"ResourceNameLimit", resourceNameLimit},
		{"LockerRefusesOptions", lockerRefusesOptions},
		{"UntrustedNamesExpire", untrustedNamesExpire},
		{"SeveralResources", severalResources},
		{"SeveralResourcesNoDeadlock", severalResourcesNoDeadlock},
		{"SharedSafeMethods", sharedSafeMethods},
		{"SharedConfig", sharedConfig},

		{"IdempotentRunsOnceAndReplays", idempotentRunsOnceAndReplays},
		{"IdempotentKeys", idempotentKeys},
		{"IdempotentKeyReused", idempotentKeyReused},
		{"IdempotentBodies", idempotentBodies},
		{"IdempotentNotKept", idempotentNotKept},
		{"IdempotentConcurrentRetries", idempotentConcurrentRetries},
		{"IdempotentRetention", idempotentRetention},
		{"IdempotentLockTTL", idempotentLockTTL},
		{"IdempotentLostLockNotKept", idempotentLostLockNotKept},
		{"IdempotentScope", idempotentScope},
		{"IdempotentLockLost", idempotentLockLost},
		{"IdempotentChainWithFence", idempotentChainWithFence},
		{"IdempotentOddKeys", idempotentOddKeys},
		{"IdempotentSkipper", idempotentSkipper},
		{"IdempotencyToMiddleware", idempotencyToMiddleware},
		{"IdempotentLockerRefuses", idempotentLockerRefuses},
		{"IdempotentLostCommitReply", idempotentLostCommitReply},
		{"IdempotentCluster", idempotentCluster},
	}
}

// parallel runs f as a parallel subtest of t named name, on an env of its own.
func parallel(t *testing.T, m Major, name string, f func(t *testing.T, v *env), opts ...fencing.Option) {
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		f(t, newEnv(t, m, opts...))
	})
}
