// Package redisproc starts and controls real redis-server processes for fault-injection
// tests: crash and restart, persistence, process pauses, replication and promotion, and a
// small Redis Cluster, with replicas if asked (ClusterReplicas), a manual failover
// (Cluster.Failover), slot migration (Cluster.MigrateSlot, Cluster.MigrateKey) and node
// restarts (Cluster.RestartNode).
//
// Every server listens on a free loopback port, keeps all its files (log, RDB, AOF,
// nodes.conf) in a directory from t.TempDir, runs in a process group of its own, and is
// killed by its process id when the test that started it ends. Nothing is written to the
// working directory, and the shared Redis on 127.0.0.1:6379 is never used.
//
// Defaults: --bind 127.0.0.1, --save "" (no RDB snapshots), --appendonly no,
// --enable-debug-command local, --repl-diskless-sync-delay 0 (replicas sync at once
// instead of after 5 s), --daemonize no, and --logfile redis.log inside the directory.
// Extra arguments given with Args come after the defaults, so they override them.
//
// Failures are reported with t.Fatalf on the testing.TB given to Start or StartCluster,
// including the tail of the server's log, so the methods that wait (Start, Restart, Stop,
// ReplicaOf, Promote, WaitSynced, StartCluster, WaitOK, Failover, MigrateSlot, MigrateKey,
// RestartNode) and the Cluster's queries (NodeFor, SlotOwner, Slot, Primaries, ReplicasOf)
// must be called from the goroutine running that test. Kill, Pause and Resume report
// failures with t.Errorf and may be called from any goroutine. A Server may be used from
// several goroutines, but lifecycle changes of one server (Kill, Stop, Restart, ReplicaOf,
// Promote) must not overlap, nor may changes of a Cluster's topology.
//
// Every wait is bounded (30 s by default, see Timeout); no wait relies on a fixed sleep.
// The server executable is redis-server from PATH, or the one FENCING_REDIS_SERVER names
// (EnvServer), such as valkey-server, run directly or under another program (Under: valgrind
// for the benchmarks' instruction counts). Tests that use the package skip, through Require, when
// redis-server is not on PATH, and fail when FENCING_REDIS_SERVER names a missing executable.
// The package needs a Unix system; process pauses are confirmed through /proc on Linux.
package redisproc
