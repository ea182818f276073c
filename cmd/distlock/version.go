package main

import (
	"runtime"
	"runtime/debug"
)

// version is distlock's module version from its build info: the tag for
// `go install …/cmd/distlock@v1.2.3`, a pseudo-version (with the commit) for
// a build from a checkout, "(devel)" when the build had no version control
// information.
func version() string {
	v := "(unknown)"
	if info, ok := debug.ReadBuildInfo(); ok {
		v = info.Main.Version
		if v == "" || v == "(devel)" {
			for _, s := range info.Settings {
				if s.Key == "vcs.revision" {
					v = "(devel) " + s.Value
				}
			}
		}
	}
	return "distlock " + v + " " + runtime.Version()
}
