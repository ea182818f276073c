package main

import (
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// setProcessName sets the name that ps, top and pgrep show: the keeper is
// started as /proc/self/exe (link.go), which they would show as "exe".
func setProcessName(name string) {
	b := append([]byte(name), 0)
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0)
}

// procInfo is what distlock reads of a process in /proc/PID/stat.
type procInfo struct {
	pid, ppid, pgrp, session int
	exited                   bool // a zombie, waiting to be reaped
}

// processes lists the processes in /proc; ok is false if it cannot be read.
func processes() (procs []procInfo, ok bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp session ...; comm may contain spaces and ")".
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 4 {
			continue
		}
		p := procInfo{pid: pid, exited: f[0] == "Z" || f[0] == "X"}
		p.ppid, _ = strconv.Atoi(f[1])
		p.pgrp, _ = strconv.Atoi(f[2])
		p.session, _ = strconv.Atoi(f[3])
		procs = append(procs, p)
	}
	return procs, true
}

// groupRunning tells whether process group pgid has a member that has not
// exited. Zombies have (they wait for a parent, often init, to reap them),
// so unlike kill(-pgid, 0) this does not wait for the reaper.
func groupRunning(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	procs, ok := processes()
	if !ok {
		return true
	}
	for _, p := range procs {
		if !p.exited && p.pgrp == pgid {
			return true
		}
	}
	return false
}

// othersInGroup tells whether processes other than distlock and its
// ancestors are in process group pgrp, distlock's: the other stages of a
// shell pipeline (`distlock run k -- make | less`), or a script's commands
// run alongside. distlock's ancestors in its group are the shells that ran
// it (a script, a subshell), waiting for it.
func othersInGroup(pgrp int) bool {
	list, ok := processes()
	if !ok {
		return true
	}
	procs := map[int]procInfo{}
	for _, p := range list {
		if !p.exited {
			procs[p.pid] = p
		}
	}
	delete(procs, os.Getpid())
	for pid := os.Getppid(); pid > 1; {
		p, ok := procs[pid]
		delete(procs, pid)
		if !ok {
			break
		}
		pid = p.ppid
	}
	for _, p := range procs {
		if p.pgrp == pgrp {
			return true
		}
	}
	return false
}

// killWithParent has the kernel SIGKILL COMMAND (the shim, which becomes
// COMMAND by exec: the setting survives it) when the runner dies. The
// keeper kills COMMAND's whole group when the runner dies, but when both
// die at once (`pkill -9 distlock`, which names both, or a kill -9 of
// each) nothing else would, and COMMAND would run on while its lease runs
// out. The signal comes when the thread that started COMMAND exits; the
// runner locks no goroutine to a thread, so its threads live as long as it
// does.
func killWithParent(sys *syscall.SysProcAttr) { sys.Pdeathsig = syscall.SIGKILL }

// readerGone returns a channel that is closed once w can take no more
// writes because its reader is gone: a pipe whose read end is closed
// (`leader --watch | head -1`), a socket hung up. A watch that writes only
// on a change learns of it at once, not at its next write. epoll reports
// EPOLLERR and EPOLLHUP without being asked for any event, so nothing is
// polled; for a regular file, which epoll refuses, the channel never
// closes. stop ends the watching.
func readerGone(w io.Writer) (gone <-chan struct{}, stop func()) {
	f, ok := w.(*os.File)
	if !ok {
		return nil, func() {}
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, func() {}
	}
	// stop closes wake's write end: its read end's EOF ends epoll_wait.
	var wake [2]int
	if err := syscall.Pipe2(wake[:], syscall.O_CLOEXEC); err != nil {
		syscall.Close(ep)
		return nil, func() {}
	}
	out := -1
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { out = int(fd) }) // unlike Fd, leaves its mode alone
	}
	if out < 0 || syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, out, &syscall.EpollEvent{Fd: int32(out)}) != nil ||
		syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, wake[0], &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(wake[0])}) != nil {
		syscall.Close(ep)
		syscall.Close(wake[0])
		syscall.Close(wake[1])
		return nil, func() {}
	}
	ch := make(chan struct{})
	go func() {
		defer syscall.Close(ep)
		defer syscall.Close(wake[0])
		events := make([]syscall.EpollEvent, 2)
		for {
			n, err := syscall.EpollWait(ep, events, -1)
			if err == syscall.EINTR {
				continue
			}
			// Any event ends it: the reader is gone, or stop was called.
			for _, e := range events[:max(n, 0)] {
				if int(e.Fd) == out {
					close(ch)
					break
				}
			}
			return
		}
	}()
	return ch, func() { syscall.Close(wake[1]) }
}
