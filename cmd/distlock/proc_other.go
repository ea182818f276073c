//go:build !linux

package main

import (
	"io"
	"syscall"
)

// setProcessName is a no-op where the keeper is started by its path.
func setProcessName(string) {}

// groupRunning tells whether process group pgid has members left; zombies
// count until reaped.
func groupRunning(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }

// othersInGroup cannot list a process group here: it guesses from distlock's
// stdin, stdout and stderr, one of which is a pipe in a pipeline.
func othersInGroup(int) bool {
	for fd := 0; fd <= 2; fd++ {
		if _, err := tcgetpgrp(fd); err != nil {
			return true
		}
	}
	return false
}

// killWithParent does nothing where there is no parent-death signal: only
// the keeper kills COMMAND when the runner dies.
func killWithParent(*syscall.SysProcAttr) {}

// readerGone never reports: a closed stdout is noticed at the next write.
func readerGone(io.Writer) (<-chan struct{}, func()) { return nil, func() {} }
