package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// runExec is the hidden `distlock __exec UNIGNORE LOG-FORMAT NAME KEY PATH
// ARG0 ARGS...`, the process that becomes COMMAND (LOG-FORMAT, NAME, the
// command it runs for, and KEY are for its one message, if exec fails). The runner starts it in COMMAND's process
// group and tells the keeper that group before it writes the go-ahead on
// fd 3; only then does the shim exec COMMAND. So COMMAND never runs where the
// keeper of a runner killed at that very moment could not find and kill it:
// if the runner dies first, fd 3 reads EOF and nothing is run. fd 4 is
// closed by the exec: the runner passes signals on only then (supervise).
func runExec(args []string) int {
	if len(args) < 6 {
		return exitUsage
	}
	unignore, format, name, key, path, argv := args[0] == "1", logFormat(args[1]), args[2], args[3], args[4], args[5:]
	goAhead := os.NewFile(3, "go-ahead")
	var b [1]byte
	if n, _ := goAhead.Read(b[:]); n != 1 {
		return exitCannotRun // the runner is gone; nobody reads this status
	}
	goAhead.Close()
	if unignore {
		// On a terminal the runner ignores SIGTTOU (front.go) and COMMAND
		// would inherit that. exec resets caught signals to their default
		// action but keeps ignored ones ignored, so catching SIGTTOU here
		// gives COMMAND the default back.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGTTOU)
	}
	syscall.CloseOnExec(4)
	err := syscall.Exec(path, argv, os.Environ())
	if errors.Is(err, syscall.ENOEXEC) {
		// An executable file without "#!" is a shell script to
		// execvp(3), and so to flock(1), env(1) and the shell: run it
		// with /bin/sh, as they do.
		sh := append([]string{"/bin/sh", path}, argv[1:]...)
		if e := syscall.Exec("/bin/sh", sh, os.Environ()); e != nil && !errors.Is(e, syscall.ENOENT) {
			err = e
		}
	}
	newRunLog(format, name, key, os.Stderr).error(evCannotRun, fmt.Sprintf("cannot run %q: %v", argv[0], err), aCommand(argv[0]), aError(err))
	if errors.Is(err, syscall.ENOENT) {
		return exitNotFound
	}
	return exitCannotRun
}
