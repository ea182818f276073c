package main

import (
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

// groupRunning tells whether process group pgid has a member that has not
// exited. Zombies have (they wait for a parent, often init, to reap them),
// so unlike kill(-pgid, 0) this does not wait for the reaper.
func groupRunning(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may contain spaces and ")".
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
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
