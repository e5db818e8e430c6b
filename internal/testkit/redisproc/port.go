package redisproc

import (
	"fmt"
	"net"
)

// freePorts returns n distinct loopback TCP ports that were free a moment ago. It holds
// all n listeners open at once so the ports differ, then closes them. The ports are not
// reserved: whoever binds one next wins, so callers retry when the server cannot bind.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
