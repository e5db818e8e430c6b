package redisproc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// process is one run of redis-server, the leader of its own process group.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
}

// spawn starts redis-server with args, its output appended to stdio; under, when not
// empty, is the command line it runs under (see Under). The child gets its own process
// group, so that signals reach the children it forks (BGSAVE, AOF rewrite).
func spawn(under []string, bin string, args, env []string, stdio *os.File) (*process, error) {
	line := append(append(slices.Clip(under), bin), args...)
	cmd := exec.Command(line[0], line[1:]...)
	cmd.Stdout, cmd.Stderr = stdio, stdio
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// pid returns the process id, which is also its process group id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has exited and been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group while the leader has not been reaped, so the
// group id cannot belong to anyone else.
func (p *process) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	if err := syscall.Kill(-p.pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to process group %d: %w", sig, p.pid(), err)
	}
	return nil
}

// wait waits until the process has exited or d has passed, and reports whether it exited.
func (p *process) wait(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.done:
		return true
	case <-timer.C:
		return false
	}
}

// exitState describes how the process ended, for error messages.
func (p *process) exitState() string {
	if !p.exited() || p.cmd.ProcessState == nil {
		return "running"
	}
	return p.cmd.ProcessState.String()
}

// waitState waits until the process is stopped by a signal (stopped true) or no longer
// stopped (stopped false), as /proc/<pid>/stat reports. Where /proc is missing it returns
// at once, trusting the signal.
func (p *process) waitState(stopped bool, d time.Duration) error {
	path := "/proc/" + strconv.Itoa(p.pid()) + "/stat"
	return waitFor(time.Now().Add(d), p.done, func() (bool, string) {
		b, err := os.ReadFile(path)
		if err != nil {
			return true, ""
		}
		// The state follows the command name, which is in parentheses and may hold spaces.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return true, ""
		}
		state := b[i+2]
		isStopped := state == 'T' || state == 't'
		return isStopped == stopped, fmt.Sprintf("process %d in state %c", p.pid(), state)
	})
}
