package main

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestRunFlags (issue 10, item 3): flags anywhere before --, flock's short
// forms, a missing KEY named as such, TTLs too short to renew refused,
// --flag spelling in errors, demo --help and --version like every help.
func TestRunFlags(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 30*time.Second)
	busy, err := c.TryLock(ctx, "busy", distlock.WithMetadata("host=other pid=1"))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Release(ctx)

	cases := []struct {
		name   string
		args   []string
		code   int
		stdout string // in stdout
		stderr string // in stderr
	}{
		{"flag after KEY", []string{"run", "k", "--wait", "0", "--", "echo", "ran"}, 0, "ran", ""},
		{"flags after KEY, no --", []string{"run", "k", "-n", "echo", "ran"}, 0, "ran", ""},
		{"-n", []string{"run", "-n", "busy", "--", "echo", "ran"}, exitNotObtained, "", "host=other pid=1"},
		{"-n after KEY", []string{"run", "busy", "-n", "--", "echo", "ran"}, exitNotObtained, "", "host=other pid=1"},
		{"-w", []string{"run", "busy", "-w", "0.2", "--", "echo", "ran"}, exitNotObtained, "", "after waiting 200ms"},
		{"missing KEY", []string{"run", "--", "true"}, exitUsage, "", "missing KEY"},
		{"missing KEY after flags", []string{"run", "-n", "--", "true"}, exitUsage, "", "missing KEY"},
		{"missing COMMAND", []string{"run", "k", "--"}, exitUsage, "", "missing COMMAND"},
		{"ttl too short", []string{"run", "--ttl", "1ms", "k", "--", "true"}, exitUsage, "", "at least " + minTTLText},
		{"ttl just too short", []string{"run", "--ttl", "499ms", "k", "--", "true"}, exitUsage, "", "at least " + minTTLText},
		{"unknown flag", []string{"run", "--frobnicate", "k", "--", "true"}, exitUsage, "", "unknown flag --frobnicate"},
		{"bad value", []string{"run", "k", "--wait", "soon", "--", "true"}, exitUsage, "", `invalid value "soon" for --wait`},
		{"missing value", []string{"run", "k", "-w"}, exitUsage, "", "-w needs a value"},
		{"status flag", []string{"status", "--jsn"}, exitUsage, "", "unknown flag --jsn"},
		{"demo --help", []string{"demo", "--help"}, 0, "usage: distlock demo", ""},
		{"demo bad flag", []string{"demo", "--workers", "x"}, exitUsage, "", "for --workers"},
		{"--version", []string{"--version"}, 0, "distlock ", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := dl(t, env, tc.args...)
			if code != tc.code || !strings.Contains(stdout, tc.stdout) || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("%v: exit %d, stdout %q, stderr %q; want %d, %q in stdout, %q in stderr",
					tc.args, code, stdout, stderr, tc.code, tc.stdout, tc.stderr)
			}
			if code == 0 && stderr != "" {
				t.Fatalf("%v: exit 0 with stderr %q", tc.args, stderr)
			}
		})
	}
	if _, out, _ := dl(t, nil, "--version"); !strings.HasSuffix(strings.TrimSpace(out), runtime.Version()) {
		t.Fatalf("--version: %q, want the module version and %s", out, runtime.Version())
	}
}

// TestVerboseWaiting (issue 10, item 3): -v says who holds the lock, once,
// while it waits, then that it took the lock.
func TestVerboseWaiting(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 20*time.Second)
	l, err := c.TryLock(ctx, "held", distlock.WithMetadata("host=other pid=1"))
	if err != nil {
		t.Fatal(err)
	}
	p := startDL(t, t.TempDir(), env, "run", "-v", "--wait", "10s", "held", "--", "true")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.stderr.String(), "host=other pid=1") {
		if time.Now().After(deadline) {
			t.Fatalf("-v does not say who holds the lock: %q", p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond) // polling another process's output
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d: %s", code, p.stderr.String())
	}
	stderr := p.stderr.String()
	if n := strings.Count(stderr, "host=other pid=1"); n != 1 || !strings.Contains(stderr, `took "held"`) || strings.Contains(stderr, "\r") {
		t.Fatalf("holder named %d times, or no took, or terminal progress off a terminal: %q", n, stderr)
	}
}
