//go:build !linux

package redisproc

import "syscall"

// dieWithParent does nothing where there is no parent-death signal.
func dieWithParent(*syscall.SysProcAttr) {}
