package main

import (
	"syscall"
	"unsafe"
)

// terminal is distlock's controlling terminal, when it runs on one: then
// COMMAND is made the terminal's foreground job and distlock relays job
// control (Ctrl-Z, fg, bg) between the shell and COMMAND's process group.
type terminal struct {
	fd   int // stdin, stdout or stderr: whichever is the controlling terminal
	pgrp int // distlock's own process group: the shell's job
}

// controllingTerminal returns the terminal if stdin, stdout or stderr is
// distlock's controlling terminal, else nil (cron, pipes, CI).
func controllingTerminal() *terminal {
	for fd := 0; fd <= 2; fd++ {
		// TIOCGPGRP fails (ENOTTY) on anything but our controlling terminal.
		if _, err := tcgetpgrp(fd); err == nil {
			return &terminal{fd: fd, pgrp: syscall.Getpgrp()}
		}
	}
	return nil
}

// foreground returns the terminal's foreground process group.
func (t *terminal) foreground() int {
	pgrp, err := tcgetpgrp(t.fd)
	if err != nil {
		return 0
	}
	return pgrp
}

// ours tells whether distlock's process group has the terminal.
func (t *terminal) ours() bool { return t.foreground() == t.pgrp }

// setForeground gives the terminal to process group pgrp. Doing so from a
// background group raises SIGTTOU unless it is ignored, which the runner
// arranges (front.go).
func (t *terminal) setForeground(pgrp int) error {
	p := int32(pgrp)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(t.fd), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&p))); e != 0 {
		return e
	}
	return nil
}

func tcgetpgrp(fd int) (int, error) {
	var p int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&p))); e != 0 {
		return 0, e
	}
	return int(p), nil
}
