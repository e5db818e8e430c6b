// Package bench holds benchmarks that compare fencekit with other Redis lock libraries. It is
// a module of its own, so that those libraries never enter the dependencies of
// github.com/fencekit/fencekit; it has no code to import, only tests.
//
// BenchmarkProcesses runs one critical-section workload on one resource, with a 1 ms hold,
// for fencekit at 1, 2, 8 and 32 processes and for github.com/bsm/redislock and
// github.com/go-redsync/redsync/v4 at 8, where each process is a client of its own. It runs
// the same rows against the Redis named by FENCING_REDIS_ADDR and against a local
// three-primary Redis Cluster.
//
// BenchmarkManyResources locks 2,000 resources of Zipf(1.1) popularity from 8 processes of
// 8 or 64 goroutines each, for a fixed time per row, with fencekit's Locker.Do,
// bsm/redislock and redsync, on the same two targets; besides throughput and waits it
// reports Redis's commands and CPU per critical section and the peak connections, pub/sub
// ones apart, sampled with CLIENT LIST. BenchmarkCapacity runs fencekit's uncontended
// TryAcquire and Release, and the many-resource workload, on local clusters of 1, 3 and 6
// primaries, at one total load and at one load per primary (paced by a token bucket), and
// reports how the cost spreads over the primaries. README.md gives the
// commands and what each figure means.
package bench
