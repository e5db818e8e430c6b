// Package bench holds benchmarks that compare fencekit with other Redis lock libraries. It is
// a module of its own, so that those libraries never enter the dependencies of
// github.com/fencekit/fencekit; it has no code to import, only tests.
//
// BenchmarkProcesses runs one critical-section workload on one resource, with a 1 ms hold,
// for fencekit at 1, 2, 8 and 32 processes and for github.com/bsm/redislock and
// github.com/go-redsync/redsync/v4 at 8, where each process is a client of its own. It runs
// the same rows against the Redis named by FENCING_REDIS_ADDR and against a local
// three-primary Redis Cluster. README.md gives the commands and what each figure means.
package bench
