package main

import (
	"os"
	"os/signal"
)

// catchable returns those of sigs that distlock was not started with
// ignored, the ones to catch. A signal that is ignored when distlock starts
// stays ignored, by distlock and by COMMAND, which inherits that, as under
// flock(1) or env(1): `nohup distlock run ...` ignores SIGHUP, and a
// script's background job (`distlock run ... &`) SIGINT. Catching such a
// signal would undo that: os/signal installs a handler, and exec then gives
// COMMAND the default action back, so a terminal's hangup would kill a
// nohup'ed job. (Go only keeps an inherited SIG_IGN, and can report it, for
// SIGHUP and SIGINT; it catches SIGQUIT and SIGTERM anyway.)
func catchable(sigs ...os.Signal) []os.Signal {
	var out []os.Signal
	for _, s := range sigs {
		if !signal.Ignored(s) {
			out = append(out, s)
		}
	}
	return out
}
