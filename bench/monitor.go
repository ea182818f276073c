package main

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"time"
)

// monitor counts the commands clients send to a server through MONITOR,
// leaving out the ones scripts run (MONITOR tags them "lua"). MONITOR slows
// the server, so it runs in a separate, untimed pass.
type monitor struct {
	conn  net.Conn
	admin net.Conn
	count chan countResult
}

type countResult struct {
	n   int64
	err error
}

const (
	markStart = "distlock-bench-start"
	markEnd   = "distlock-bench-end"
)

func startMonitor(addr string) (*monitor, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	adm, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		conn.Close()
		return nil, err
	}
	m := &monitor{conn: conn, admin: adm, count: make(chan countResult, 1)}
	r := bufio.NewReaderSize(conn, 1<<20)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		m.close()
		return nil, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		m.close()
		return nil, fmt.Errorf("MONITOR: %q %v", line, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	started := make(chan error, 1)
	go func() {
		var n int64
		counting := false
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				if !counting {
					started <- err
				}
				m.count <- countResult{err: err}
				return
			}
			// +1700000000.123456 [0 127.0.0.1:5000] "evalsha" ...
			switch {
			case strings.Contains(line, markStart):
				counting = true
				started <- nil
			case strings.Contains(line, markEnd):
				m.count <- countResult{n: n}
				return
			case counting && !strings.Contains(line, " lua] "):
				n++
			}
		}
	}()
	if err := m.mark(markStart); err != nil {
		m.close()
		return nil, err
	}
	select {
	case err := <-started:
		if err != nil {
			m.close()
			return nil, err
		}
	case <-time.After(5 * time.Second):
		m.close()
		return nil, fmt.Errorf("MONITOR: start marker not seen")
	}
	return m, nil
}

func (m *monitor) mark(s string) error {
	_ = m.admin.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(m.admin, "ECHO %s\r\n", s); err != nil {
		return err
	}
	buf := make([]byte, 256)
	_, err := m.admin.Read(buf)
	return err
}

// stop returns the number of client commands between start and stop.
func (m *monitor) stop() (int64, error) {
	if err := m.mark(markEnd); err != nil {
		return 0, err
	}
	select {
	case r := <-m.count:
		return r.n, r.err
	case <-time.After(30 * time.Second):
		return 0, fmt.Errorf("MONITOR: end marker not seen")
	}
}

func (m *monitor) close() {
	m.conn.Close()
	m.admin.Close()
}
