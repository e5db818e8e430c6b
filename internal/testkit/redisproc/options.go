package redisproc

import "time"

// defaultTimeout bounds every wait unless Timeout says otherwise.
const defaultTimeout = 30 * time.Second

// Option configures a server started by Start or StartCluster.
type Option func(*config)

type config struct {
	args      []string
	env       []string
	under     []string // the command line the server runs under, before its own
	replicaOf *Server
	cluster   bool
	replicas  int // replicas per primary, for StartCluster
	timeout   time.Duration
}

func newConfig(opts []Option) config {
	cfg := config{timeout: defaultTimeout}
	for _, opt := range opts {
		opt(&cfg)
	}
	return cfg
}

// Args appends configuration arguments to the redis-server command line, after the
// defaults, so that they override them: Args("--appendonly", "yes", "--appendfsync", "always").
// Restart reuses them. By default no extra arguments are given.
func Args(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// Env adds environment variables, each "KEY=value", to the ones the server inherits from
// the test process; for example LD_PRELOAD and FAKETIME to run it under libfaketime.
// By default the server inherits the test's environment unchanged.
func Env(kv ...string) Option {
	return func(c *config) { c.env = append(c.env, kv...) }
}

// Under runs the server under another program: command and its arguments come before the
// server's executable and its arguments, as in
// Under("valgrind", "--tool=callgrind", "--callgrind-out-file=/tmp/cg/callgrind.out.%p").
// The program must run the server in its own process (valgrind and env do), so that PID,
// Pause and Kill reach the server. Restart reuses it. By default the server runs directly.
func Under(command ...string) Option {
	return func(c *config) { c.under = append(c.under, command...) }
}

// ReplicaOf starts the server as a replica of primary (--replicaof), and makes Start wait
// until the replica is linked and has caught up with the primary. By default a server is
// a primary. It cannot be combined with ClusterMode.
func ReplicaOf(primary *Server) Option {
	return func(c *config) { c.replicaOf = primary }
}

// ClusterMode starts the server as an empty Redis Cluster node: --cluster-enabled yes,
// --cluster-config-file nodes.conf in the server's directory, --cluster-node-timeout 2000
// and a free --cluster-port for the cluster bus. The node owns no slots and knows no
// other node; StartCluster does that. By default cluster mode is off.
func ClusterMode() Option {
	return func(c *config) { c.cluster = true }
}

// ClusterReplicas makes StartCluster give each primary n replicas (CLUSTER REPLICATE), and
// makes it and WaitOK wait until every replica is linked to its primary and done syncing.
// Start ignores it. By default a cluster has no replicas; values < 0 count as 0.
func ClusterReplicas(n int) Option {
	return func(c *config) { c.replicas = max(n, 0) }
}

// Timeout bounds each wait: for PING after a start, for a replica to sync, for a process
// to stop, and for a cluster to become healthy. The default is 30 s; values <= 0 keep it.
func Timeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.timeout = d
		}
	}
}
