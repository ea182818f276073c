package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRunScriptWithoutShebang: a command that is an executable file
// without "#!" is a shell script to execvp(3), which flock(1), env(1),
// setsid(1) and the shell use; all of them run it with /bin/sh. distlock,
// "like flock(1)", must run it too, not refuse it with 126 (exec format
// error). Crontab jobs that are such scripts are not rare.
func TestRunScriptWithoutShebang(t *testing.T) {
	env, _, _ := server(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "report")
	if err := os.WriteFile(script, []byte("echo \"ran $1 $DISTLOCK_KEY\"\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{script, "./report"} {
		p := startDL(t, dir, env, "run", "-n", "noshebang", "--", cmd, "arg1")
		if code := p.wait(t, 10*time.Second); code != 3 || p.stdout.String() != "ran arg1 noshebang\n" {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q; want the script's 3 and its output, as under flock(1)",
				cmd, code, p.stdout.String(), p.stderr.String())
		}
	}
}
