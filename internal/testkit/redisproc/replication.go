package redisproc

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// ReplicaOf makes the server a replica of primary with REPLICAOF, and waits until it is
// linked and has caught up (see WaitSynced). The replica's data is replaced by the
// primary's. Restart keeps the role. On failure it fails the test with both logs.
func (s *Server) ReplicaOf(primary *Server) {
	s.tb.Helper()
	port := strconv.Itoa(primary.Port())
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.timeout)
	defer cancel()
	if err := s.Do(ctx, "REPLICAOF", "127.0.0.1", port).Err(); err != nil {
		s.tb.Fatalf("redisproc: REPLICAOF 127.0.0.1 %s on %s: %v\n%s", port, s.Addr(), err, s.LogTail())
	}
	s.mu.Lock()
	s.primary = "127.0.0.1 " + port
	s.mu.Unlock()
	primary.WaitSynced(s)
}

// Promote turns a replica into a primary with REPLICAOF NO ONE, an unsafe promotion that
// does not wait for the replica to catch up. Writes acknowledged by the old primary but
// not yet replicated are lost on the promoted server. Restart keeps the role. On
// failure it fails the test.
func (s *Server) Promote() {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.timeout)
	defer cancel()
	if err := s.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		s.tb.Fatalf("redisproc: REPLICAOF NO ONE on %s: %v\n%s", s.Addr(), err, s.LogTail())
	}
	s.mu.Lock()
	s.primary = ""
	s.mu.Unlock()
}

// WaitSynced waits until replica reports an up link to this server (master_link_status:up
// with this server's port) and has processed every write this server had accepted when
// WaitSynced was called (slave_repl_offset >= master_repl_offset). On timeout it fails
// the test with both logs.
func (s *Server) WaitSynced(replica *Server) {
	s.tb.Helper()
	deadline := time.Now().Add(s.cfg.timeout)
	port := strconv.Itoa(s.Port())
	target := int64(-1)
	err := waitFor(deadline, nil, func() (bool, string) {
		if target < 0 {
			p, err := s.info(remaining(deadline), "replication")
			if err != nil {
				return false, fmt.Sprintf("INFO on primary %s: %v", s.Addr(), err)
			}
			target, err = strconv.ParseInt(p["master_repl_offset"], 10, 64)
			if err != nil {
				target = -1
				return false, fmt.Sprintf("primary %s: master_repl_offset %q", s.Addr(), p["master_repl_offset"])
			}
		}
		r, err := replica.info(remaining(deadline), "replication")
		if err != nil {
			return false, fmt.Sprintf("INFO on replica %s: %v", replica.Addr(), err)
		}
		if r["role"] != "slave" || r["master_port"] != port || r["master_link_status"] != "up" {
			return false, fmt.Sprintf("replica %s: role:%s master_port:%s master_link_status:%s",
				replica.Addr(), r["role"], r["master_port"], r["master_link_status"])
		}
		offset, err := strconv.ParseInt(r["slave_repl_offset"], 10, 64)
		if err != nil || offset < target {
			return false, fmt.Sprintf("replica %s: slave_repl_offset %s, want >= %d",
				replica.Addr(), r["slave_repl_offset"], target)
		}
		return true, ""
	})
	if err != nil {
		s.tb.Fatalf("redisproc: wait for replica %s of %s: %v\n%s\n%s", replica.Addr(), s.Addr(), err, s.LogTail(), replica.LogTail())
	}
}
