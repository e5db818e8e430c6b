package redisproc

import (
	"errors"
	"syscall"
	"time"
)

// restartRetry is how long Restart waits before binding the port again after the port
// was found taken.
const restartRetry = 50 * time.Millisecond

// current returns the running process, or nil.
func (s *Server) current() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// detach forgets the running process and returns it, or nil.
func (s *Server) detach() *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	s.proc = nil
	return p
}

// Kill kills the server with SIGKILL, like a crash, and waits until it has exited. Data
// not yet written to the AOF or an RDB is lost; data written with write(2) survives in
// the page cache. Kill does nothing when the server is not running, and works on a paused
// server. It may be called from any goroutine and reports failures with t.Errorf.
func (s *Server) Kill() {
	p := s.detach()
	if p == nil {
		return
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		s.tb.Errorf("redisproc: kill %s: %v", s.Addr(), err)
		return
	}
	if !p.wait(s.cfg.timeout) {
		s.tb.Errorf("redisproc: kill %s: process %d still running after %v", s.Addr(), p.pid(), s.cfg.timeout)
	}
}

// Stop shuts the server down cleanly with SHUTDOWN NOSAVE NOW: the AOF, if enabled, is
// flushed; no RDB is written; lagging replicas are not waited for. If the server does
// not exit within the timeout it gets SIGTERM, then SIGKILL. A paused server is resumed
// first. Stop does nothing when the server is not running.
func (s *Server) Stop() {
	s.tb.Helper()
	p := s.detach()
	if p == nil {
		return
	}
	_ = p.signal(syscall.SIGCONT)
	// The server closes the connection without a reply when it shuts down.
	_, _ = probe(s.Addr(), s.cfg.timeout, "SHUTDOWN", "NOSAVE", "NOW")
	if p.wait(s.cfg.timeout) {
		return
	}
	_ = p.signal(syscall.SIGTERM)
	if p.wait(s.cfg.timeout) {
		return
	}
	_ = p.signal(syscall.SIGKILL)
	if !p.wait(s.cfg.timeout) {
		s.tb.Fatalf("redisproc: stop %s: process %d still running\n%s", s.Addr(), p.pid(), s.LogTail())
	}
}

// Restart starts the server again on the same port and directory with the same arguments
// and waits until it answers PING; a running server is killed first, as by Kill. It keeps
// the replication role last set by ReplicaOf or Promote, but does not wait for a replica
// to sync (see WaitSynced). While the port is briefly taken by someone else, Restart
// retries until the timeout; then it fails the test with the tail of the log.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	deadline := time.Now().Add(s.cfg.timeout)
	for {
		err := s.launch(deadline)
		if err == nil {
			return
		}
		if !errors.Is(err, errAddrInUse) || !time.Now().Add(restartRetry).Before(deadline) {
			s.tb.Fatalf("redisproc: restart redis-server on %s: %v\n%s", s.Addr(), err, s.LogTail())
		}
		time.Sleep(restartRetry) // back off before binding again; the deadline bounds the loop
	}
}

// Pause stops the server's process group with SIGSTOP and waits until the kernel reports
// it stopped. Connections stay open; commands queue and wait, and keys keep expiring in
// wall-clock time. It may be called from any goroutine and reports failures with
// t.Errorf. Pausing a server that is not running is an error.
func (s *Server) Pause() {
	s.signalState(syscall.SIGSTOP, true)
}

// Resume continues a paused server with SIGCONT and waits until it runs again. It may be
// called from any goroutine and reports failures with t.Errorf.
func (s *Server) Resume() {
	s.signalState(syscall.SIGCONT, false)
}

func (s *Server) signalState(sig syscall.Signal, stopped bool) {
	p := s.current()
	if p == nil {
		s.tb.Errorf("redisproc: %v %s: server is not running", sig, s.Addr())
		return
	}
	if err := p.signal(sig); err != nil {
		s.tb.Errorf("redisproc: %v", err)
		return
	}
	if err := p.waitState(stopped, s.cfg.timeout); err != nil {
		s.tb.Errorf("redisproc: %v %s: %v", sig, s.Addr(), err)
	}
}
