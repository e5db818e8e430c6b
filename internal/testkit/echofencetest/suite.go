package echofencetest

import (
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/fencekit/fencekit/fencing"
)

// Run runs the whole suite against m, each case as a parallel subtest named after its
// function, capitalised: tokenInContextAndHeader runs as TokenInContextAndHeader.
func Run(t *testing.T, m Major) {
	for _, run := range slices.Concat(cases(), stalledCases()) {
		name := runtime.FuncForPC(reflect.ValueOf(run).Pointer()).Name()
		name = name[strings.LastIndexByte(name, '.')+1:]
		t.Run(string(unicode.ToUpper(rune(name[0])))+name[1:], func(t *testing.T) {
			t.Parallel()
			run(t, m)
		})
	}
}

// testCase is a case of the suite.
type testCase = func(t *testing.T, m Major)

// cases returns the suite's cases but those that stop a process (stalledCases).
func cases() []testCase {
	return []testCase{
		tokenInContextAndHeader, badKey, extractorStatusErrorPassesThrough, busy, busyRetryAfter, maxWait, limit,
		unavailable, releases, releasesOnDisconnect, lockLostCancelsContext, lostLock, lostLockForReal,
		concurrentRequestsNeverOverlap, differentResourcesRunInParallel, namespaces, routeNames, defaultConfig,
		skipSafeMethods, nestedOnSameResourceIsReentrant, contextKeyKeptForLoggers, groupUnknownPath,
		toMiddleware, constants, fenceWithConfigPanicsOnInvalidConfig, resourceNameLimit, lockerRefusesOptions,
		untrustedNamesExpire, severalResources, severalResourcesNoDeadlock, sharedSafeMethods, sharedConfig,

		idempotentRunsOnceAndReplays, idempotentKeys, idempotentKeyReused, idempotentBodies, idempotentNotKept,
		idempotentConcurrentRetries, idempotentRetention, idempotentLockTTL, idempotentLostLockNotKept,
		idempotentScope, idempotentLockLost, idempotentChainWithFence, idempotentOddKeys, idempotentSkipper,
		idempotencyToMiddleware, idempotentLockerRefuses, idempotentLostCommitReply, idempotentCluster,
	}
}

// parallel runs f as a parallel subtest of t named name, on an env of its own.
func parallel(t *testing.T, m Major, name string, f func(t *testing.T, v *env), opts ...fencing.Option) {
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		f(t, newEnv(t, m, opts...))
	})
}
