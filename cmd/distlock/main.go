// Command distlock runs commands under distributed locks on Redis and
// inspects them.
package main

import (
	"fmt"
	"io"
	"os"
)

// Exit codes.
const (
	exitUsage = 64 // bad usage (EX_USAGE)
	exitRedis = 69 // Redis unreachable or failing (EX_UNAVAILABLE)
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "usage: distlock demo\n")
		return exitUsage
	}
	switch args[0] {
	case "demo":
		return runDemo(args[1:], stdout, stderr)
	case "demo-worker":
		return runDemoWorker(args[1:])
	}
	fmt.Fprintf(stderr, "distlock: unknown command %q\n", args[0])
	return exitUsage
}
