// Package fencekit holds what the whole module shares: its release version. The library
// itself is in the packages below it: [github.com/fencekit/fencekit/fencing] (the locks),
// [github.com/fencekit/fencekit/store] (token checks in your store), and the adapters
// [github.com/fencekit/fencekit/middleware-v5] (Echo v5),
// [github.com/fencekit/fencekit/middleware] (Echo v4),
// [github.com/fencekit/fencekit/asynqfence] (Asynq),
// [github.com/fencekit/fencekit/cronfence] (robfig/cron v3) and
// [github.com/fencekit/fencekit/tracing] (OpenTelemetry); and the operators' page,
// [github.com/fencekit/fencekit/dashboard].
package fencekit
