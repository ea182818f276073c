package redisproc

import "syscall"

// dieWithParent has the kernel kill the server when the process that
// started it dies, however it dies: a test binary killed by a timeout or a
// closed pipe would otherwise leave its servers running. (The signal comes
// when the starting thread exits; Go ends a thread only when a goroutine
// locked to it exits, and nothing here locks one.)
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
