package asynqtrace

import "github.com/fencekit/fencekit"

// ScopeName is the instrumentation scope of the spans this package records: its import
// path.
const ScopeName = "github.com/fencekit/fencekit/tracing/asynqtrace"

// Version is the instrumentation version recorded with ScopeName: the module's release.
const Version = fencekit.Version
