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

// killWithParent does nothing where there is no parent-death signal: only
// the keeper kills COMMAND when the runner dies.
func killWithParent(*syscall.SysProcAttr) {}

// readerGone never reports: a closed stdout is noticed at the next write.
func readerGone(io.Writer) (<-chan struct{}, func()) { return nil, func() {} }
