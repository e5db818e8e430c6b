// Package servercheck reads the settings of the Redis servers behind a [fencing.Locker] and
// says what they mean for its fencing tokens: whether an event short of operator error (a
// crash, a restart, a failover, memory pressure) can make the Locker issue a token that is not
// higher than one it issued before, and which settings refuse the Locker outright. Call
// [Check] at start-up; `fencekit check` runs it from the command line.
package servercheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fencekit/fencekit/fencing"
	"github.com/fencekit/fencekit/internal/topology"
)

// ErrUnsafe means a Redis server's settings let it lose a resource's fence counter and lock
// keys at any time: its maxmemory-policy is one of the allkeys-* policies, which may evict
// keys that have no TTL once memory is full. [Check] returns it.
var ErrUnsafe = errors.New("servercheck: unsafe server settings")

// A Report describes the settings of the Redis servers behind a [fencing.Locker] and what
// they mean for its tokens. [Check] returns it.
type Report struct {
	// Nodes has one entry per server checked, in address order: the server of a Client
	// (the current primary of a failover Client), every primary of a ClusterClient, every
	// shard of a Ring.
	Nodes []NodeReport
	// TokensCanRegress reports whether some event short of operator error (a crash, a
	// restart, a failover, memory pressure, a Ring losing a shard) can make the Locker issue
	// a token that is not higher than one it issued before. It is true when any node's is,
	// and on a Ring without WithServerTimeFloor.
	TokensCanRegress bool
	// Warnings lists every risk found, each node's prefixed with its address.
	Warnings []string
}

// A NodeReport describes one Redis server's settings. A field the check could not read has
// its zero value, except MaxMemory and Replicas, which are then -1. A server whose
// settings could not be read at all counts as one whose tokens can regress.
type NodeReport struct {
	// Addr is the server's address as the client knows it.
	Addr string
	// Server names the server software from INFO server: its server_name ("valkey"), or
	// "redis" when it reports none; "" when unknown. Version is its version (valkey_version
	// on Valkey, redis_version on Redis); "" when unknown.
	Server, Version string
	// Role is "master" or "slave", as INFO replication reports it; "" when unknown.
	Role string
	// Replicas is the number of replicas connected to the server, or -1 when unknown.
	Replicas int
	// EvictionPolicy is the maxmemory-policy, such as "noeviction" or "allkeys-lru".
	EvictionPolicy string
	// MaxMemory is the maxmemory limit in bytes (0: no limit), or -1 when unknown.
	MaxMemory int64
	// AppendOnly reports whether the append-only file is on (appendonly yes).
	AppendOnly bool
	// AppendFsync is the appendfsync policy: "always", "everysec" or "no"; "" when unknown.
	AppendFsync string
	// Save holds the RDB save points as CONFIG GET save returns them ("3600 1 300 100");
	// "" when snapshots are off or unknown (see Persistence).
	Save string
	// Persistence sums up what survives a crash and restart: "aof-always", "aof-everysec",
	// "aof-no", "aof" (appendfsync unknown), "rdb" (snapshots only), "none", or "no-aof"
	// (no append-only file; whether snapshots are taken is unknown). "" when unknown.
	Persistence string
	// TokensCanRegress reports whether this server can issue a token again or go back,
	// given the Locker's settings (see [Report.TokensCanRegress]).
	TokensCanRegress bool
	// Unsafe reports whether the server's settings make the Locker refuse it
	// ([ErrUnsafe]).
	Unsafe bool
	// Warnings lists the risks found on this server, in plain words.
	Warnings []string
}

// Check reads the settings of every Redis server behind locker (CONFIG GET
// maxmemory-policy, maxmemory, appendonly, appendfsync and save, and INFO replication and
// server) and reports whether its fencing tokens can regress, for a start-up check, and which
// server and version it found (Redis or Valkey): the server of a Client (the current primary
// of a failover Client), every primary of a ClusterClient, every shard of a Ring. It sends no
// write.
//
// It returns an error wrapping [ErrUnsafe] when a server's maxmemory-policy is allkeys-*
// (whatever maxmemory is, since it can be set at run time): such a server may evict a fence
// counter, and tokens then start again at 1. Other risks are reported as warnings, without an
// error: volatile-* policies (lock keys may be evicted before their TTL), persistence that
// loses recent writes on a crash (none, RDB only, appendfsync everysec or no), replicas that
// a failover may promote before they saw the latest acquisitions, and a Ring. The Locker's
// own settings count: with fencing.WithServerTimeFloor, lost counters no longer make tokens
// regress; with fencing.WithReplicas covering every connected replica, a failover does not.
//
// When CONFIG GET is not available (an ACL user without +config|get, a managed service
// that disables CONFIG), Check falls back to INFO memory and INFO persistence, and warns
// that appendfsync and the save points are unknown. When neither can be read it returns an
// error that does not match ErrUnsafe and says why: the permissions missing (no
// +config|get and no +info), or that the server lacks the commands (miniredis implements
// neither CONFIG nor these INFO sections). An unusable Locker returns its [fencing.Locker.Err] (a nil locker, an error
// wrapping fencing.ErrInvalid); connection errors are returned as they are. The report
// always holds what could be read, also alongside an error. Check never panics, and it is
// safe for concurrent use; a closed Locker can still be checked.
func Check(ctx context.Context, locker *fencing.Locker) (Report, error) {
	var rep Report
	if locker == nil {
		return rep, fmt.Errorf("servercheck: nil Locker: %w", fencing.ErrInvalid)
	}
	if err := locker.Err(); err != nil && !errors.Is(err, fencing.ErrClosed) {
		return rep, err
	}
	settings := locker.Settings()
	topo := topology.Of(locker.Client())
	var (
		mu    sync.Mutex
		errs  []error
		nodes []NodeReport
	)
	err := topo.EachServer(ctx, func(ctx context.Context, c redis.Cmdable, addr string) error {
		n, err := readNode(ctx, c, addr)
		if err == nil {
			assess(&n, settings)
		} else {
			// Unknown settings: assume the worst.
			n.TokensCanRegress = true
			n.Warnings = append(n.Warnings, "settings unknown: "+replyText(err))
		}
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, n)
		if err != nil {
			errs = append(errs, fmt.Errorf("servercheck: %s: %w", addr, err))
		}
		return nil
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("servercheck: %w", err))
	}
	slices.SortFunc(nodes, func(a, b NodeReport) int { return strings.Compare(a.Addr, b.Addr) })
	rep.Nodes = nodes
	for _, n := range nodes {
		rep.TokensCanRegress = rep.TokensCanRegress || n.TokensCanRegress
		for _, w := range n.Warnings {
			rep.Warnings = append(rep.Warnings, n.Addr+": "+w)
		}
		if n.Unsafe {
			errs = append(errs, fmt.Errorf("%w: %s has maxmemory-policy %s, which can evict the fence counter and the lock keys; use noeviction", ErrUnsafe, n.Addr, n.EvictionPolicy))
		}
	}
	if topo.Kind == topology.Ring && !settings.ServerTimeFloor {
		rep.TokensCanRegress = true
		rep.Warnings = append(rep.Warnings, "a Ring moves a resource to another shard when shards are added or removed, and tokens then restart from that shard's counter; use WithServerTimeFloor, or a Client or ClusterClient")
	}
	return rep, errors.Join(errs...)
}

// configParams are the settings Check reads with CONFIG GET, one per command so that
// servers older than Redis 7 answer too.
var configParams = []string{"maxmemory-policy", "maxmemory", "appendonly", "appendfsync", "save"}

// readNode reads one server's settings. A nil error means the eviction policy and the
// append-only setting are known.
func readNode(ctx context.Context, c redis.Cmdable, addr string) (NodeReport, error) {
	n := NodeReport{Addr: addr, MaxMemory: -1, Replicas: -1}
	pipe := c.Pipeline()
	cfgs := make([]*redis.MapStringStringCmd, len(configParams))
	for i, p := range configParams {
		cfgs[i] = pipe.ConfigGet(ctx, p)
	}
	repl := pipe.Info(ctx, "replication")
	srv := pipe.Info(ctx, "server")
	_, _ = pipe.Exec(ctx)
	if text, err := srv.Result(); err == nil {
		applyServer(&n, parseInfo(text))
	}

	settings := make(map[string]string)
	var cfgErr error
	for _, cmd := range cfgs {
		m, err := cmd.Result()
		if err != nil {
			cfgErr = err
			break
		}
		for k, v := range m {
			settings[strings.ToLower(k)] = v
		}
	}
	if cfgErr != nil && !isReply(cfgErr) {
		return n, cfgErr // unreachable, timed out, cancelled
	}
	if text, err := repl.Result(); err == nil {
		applyReplication(&n, parseInfo(text))
	} else if !isReply(err) {
		return n, err
	} else {
		n.Warnings = append(n.Warnings, "INFO replication failed ("+replyText(err)+"): whether replicas are attached is unknown")
	}
	if cfgErr == nil {
		applyConfig(&n, settings)
		return n, nil
	}

	// No CONFIG: read what INFO has (the eviction policy and whether the AOF is on).
	fields, infoErr := readInfo(ctx, c)
	if infoErr != nil && !isReply(infoErr) {
		return n, infoErr
	}
	if infoErr == nil {
		if applyInfo(&n, fields) {
			n.Warnings = append(n.Warnings, "CONFIG GET failed ("+replyText(cfgErr)+"): settings read from INFO; appendfsync and RDB save points unknown")
			return n, nil
		}
		infoErr = errors.New("no maxmemory_policy or aof_enabled field")
	}
	// The server may lack the commands (miniredis, a service that disables CONFIG), which no
	// permission grants, or deny them to the user (NOPERM), which one does.
	why := "the Redis user needs +config|get or +info"
	if lacks(cfgErr) && (lacks(infoErr) || !isReply(infoErr)) && !noPerm(infoErr) {
		why = "the server lacks CONFIG GET and the INFO memory and persistence fields (as miniredis does)"
	}
	return n, fmt.Errorf("cannot read its settings (CONFIG GET: %w; INFO: %w); %s", cfgErr, infoErr, why)
}

// lacks reports whether err is a server's reply that it does not implement the command or
// the INFO section asked for ("ERR unknown command", miniredis's "section (memory) is not
// supported"), as opposed to denying it (noPerm).
func lacks(err error) bool {
	if !isReply(err) {
		return false
	}
	text := strings.ToLower(replyText(err))
	return strings.Contains(text, "unknown command") || strings.Contains(text, "unknown subcommand") || strings.Contains(text, "is not supported")
}

// noPerm reports whether err is an ACL refusal (NOPERM).
func noPerm(err error) bool { return isReply(err) && strings.HasPrefix(replyText(err), "NOPERM") }

// readInfo returns the fields of INFO memory and INFO persistence, asked for one section
// at a time so that servers older than Redis 7 answer too.
func readInfo(ctx context.Context, c redis.Cmdable) (map[string]string, error) {
	pipe := c.Pipeline()
	mem := pipe.Info(ctx, "memory")
	pers := pipe.Info(ctx, "persistence")
	_, _ = pipe.Exec(ctx)
	fields := make(map[string]string)
	for _, cmd := range []*redis.StringCmd{mem, pers} {
		text, err := cmd.Result()
		if err != nil {
			return nil, err
		}
		maps.Copy(fields, parseInfo(text))
	}
	return fields, nil
}

// isReply reports whether err is an error reply from Redis, as opposed to a connection
// or context error.
func isReply(err error) bool {
	var r redis.Error
	return errors.As(err, &r)
}

// replyText returns an error reply's first line, without anything that follows.
func replyText(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// parseInfo parses INFO output: "key:value" lines, ended by CR, LF or both; "#" lines and
// lines without ':' are skipped. Keys are lower-cased; values keep their case, without surrounding white space.
func parseInfo(text string) map[string]string {
	fields := make(map[string]string)
	for _, line := range strings.FieldsFunc(text, func(r rune) bool { return r == '\r' || r == '\n' }) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if ok && k != "" {
			fields[strings.ToLower(k)] = strings.TrimSpace(v)
		}
	}
	return fields
}

// applyReplication records a server's role and connected replicas from INFO replication.
func applyReplication(n *NodeReport, fields map[string]string) {
	n.Role = fields["role"]
	if v, err := strconv.Atoi(fields["connected_slaves"]); err == nil && v >= 0 {
		n.Replicas = v
	}
}

// applyServer records the server software and version from INFO server.
func applyServer(n *NodeReport, f map[string]string) {
	n.Server = f["server_name"]
	if n.Server == "" && f["redis_version"] != "" {
		n.Server = "redis"
	}
	if n.Server != "" {
		n.Version = f[n.Server+"_version"]
	}
}

// applyConfig records the settings read with CONFIG GET.
func applyConfig(n *NodeReport, s map[string]string) {
	n.EvictionPolicy = strings.ToLower(s["maxmemory-policy"])
	if v, err := strconv.ParseInt(s["maxmemory"], 10, 64); err == nil && v >= 0 {
		n.MaxMemory = v
	}
	n.AppendOnly = strings.EqualFold(s["appendonly"], "yes")
	n.AppendFsync = strings.ToLower(s["appendfsync"])
	n.Save = strings.Join(strings.Fields(s["save"]), " ")
	_, fsyncKnown := s["appendfsync"]
	_, saveKnown := s["save"]
	n.Persistence = persistence(n.AppendOnly, fsyncKnown, n.AppendFsync, saveKnown, n.Save)
}

// applyInfo records the settings INFO memory and INFO persistence carry. It reports
// whether both the eviction policy and the append-only setting were found.
func applyInfo(n *NodeReport, f map[string]string) bool {
	policy, okPolicy := f["maxmemory_policy"]
	aof, okAOF := f["aof_enabled"]
	if !okPolicy || !okAOF {
		return false
	}
	n.EvictionPolicy = strings.ToLower(policy)
	if v, err := strconv.ParseInt(f["maxmemory"], 10, 64); err == nil && v >= 0 {
		n.MaxMemory = v
	}
	n.AppendOnly = aof == "1"
	n.Persistence = persistence(n.AppendOnly, false, "", false, "")
	return true
}

// persistence sums up the persistence settings; see NodeReport.Persistence.
func persistence(aof, fsyncKnown bool, fsync string, saveKnown bool, save string) string {
	switch {
	case aof && fsyncKnown && (fsync == "always" || fsync == "everysec" || fsync == "no"):
		return "aof-" + fsync
	case aof:
		return "aof"
	case !saveKnown:
		return "no-aof"
	case save != "":
		return "rdb"
	}
	return "none"
}

// assess sets a node's verdicts and warnings from its settings and the Locker's.
func assess(n *NodeReport, cfg fencing.Settings) {
	floor := cfg.ServerTimeFloor
	regress := false
	switch p := n.EvictionPolicy; {
	case strings.HasPrefix(p, "allkeys-"):
		n.Unsafe, regress = true, true
		n.Warnings = append(n.Warnings, "maxmemory-policy "+p+" may evict the fence counter (tokens start again at 1) and held locks")
	case strings.HasPrefix(p, "volatile-"):
		n.Warnings = append(n.Warnings, "maxmemory-policy "+p+" may evict held locks (they have a TTL) before they expire when memory is full, so two owners can hold a lock at once; fence counters have no TTL and are kept")
	case p == "noeviction":
	case p == "":
		n.Warnings = append(n.Warnings, "maxmemory-policy unknown")
	default:
		n.Warnings = append(n.Warnings, "maxmemory-policy "+p+" not recognised")
	}
	var lose string
	switch n.Persistence {
	case "aof-always":
	case "aof-everysec":
		lose = "appendfsync everysec: a host crash (power loss, kernel panic) can lose about the last second or two of acquisitions, and so can a process crash while the disk is slow"
	case "aof-no":
		lose = "appendfsync no: a host crash can lose the acquisitions the OS had not written yet (often 30 s)"
	case "aof":
		lose = "appendfsync unknown: unless it is always, a host crash can lose the latest acquisitions"
	case "rdb":
		lose = "no append-only file: a restart loads the last RDB snapshot and issues again the tokens issued since"
	case "none":
		lose = "no persistence: a restart empties the server and tokens start again at 1"
	default:
		lose = "no append-only file: a restart loses the acquisitions since the last RDB snapshot, if any"
	}
	if lose != "" && !floor {
		regress = true
		n.Warnings = append(n.Warnings, lose+"; use appendonly yes with appendfsync always, or WithServerTimeFloor")
	}
	switch {
	case n.Role == "slave":
		n.Warnings = append(n.Warnings, "this server is a replica: acquisitions fail with READONLY")
	case n.Replicas < 0:
		if !floor {
			regress = true
			n.Warnings = append(n.Warnings, "replicas unknown: a failover to a replica that missed the latest acquisitions would issue their tokens again")
		}
	case n.Replicas > 0 && !floor && cfg.Replicas < n.Replicas:
		regress = true
		n.Warnings = append(n.Warnings, fmt.Sprintf("%d replica(s) connected, %d acknowledgement(s) required (WithReplicas): a failover to a replica that missed the latest acquisitions issues their tokens again; use WithReplicas(%d, …) or WithServerTimeFloor", n.Replicas, cfg.Replicas, n.Replicas))
	}
	n.TokensCanRegress = regress
}
