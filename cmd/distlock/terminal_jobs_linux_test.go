package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// `distlock run` jobs on a terminal, against the promises of docs/cli.md
// ("On a terminal"): both tests fail on 2673285 (found in review).

// TestTerminalCtrlCStopsTheScriptThatRanIt: docs/cli.md, On a terminal: "Ctrl-C
// goes to the command. If it dies of it, distlock releases the lock and
// then dies of SIGINT too (as flock would), so a shell loop or script that
// ran it stops as well." A script run at the prompt (`bash job.sh`) is the
// terminal's foreground job; distlock moves COMMAND into a group of its
// own and gives it the terminal, so Ctrl-C reaches COMMAND only, not the
// script's shell. bash only stops a script whose foreground child died of
// SIGINT if it got the SIGINT itself; it did not, so the script runs on
// with its next line, where under flock(1) (all in one group) it stops.
func TestTerminalCtrlCStopsTheScriptThatRanIt(t *testing.T) {
	env, c, _ := server(t)
	sh := startShell(t, env)
	script := `"$DL" run term-script -- sh -c 'echo $$ > cmd.pid; exec sleep 30'
echo "after-distlock rc=$?"
`
	if err := os.WriteFile(filepath.Join(sh.dir, "job.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	sh.typ(t, `bash job.sh; echo "script-rc=$?"`+"\n")
	waitHeld(t, c, "term-script")
	pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(sh.dir, "cmd.pid"), 10*time.Second)))
	for deadline := time.Now().Add(10 * time.Second); processState(pid) == "" || !strings.Contains(readProcCmdline(pid), "sleep"); time.Sleep(5 * time.Millisecond) { // polling another process's exec
		if time.Now().After(deadline) {
			t.Fatalf("COMMAND did not start sleeping")
		}
	}
	sh.typ(t, "\x03")
	waitDead(t, pid, 10*time.Second, time.Now())
	sh.expect(t, prompt, 10*time.Second) // after the script and its last echo
	out := sh.out.String()
	if strings.Contains(out, "after-distlock") {
		t.Fatalf("Ctrl-C killed COMMAND, but the script that ran distlock went on with its next line:\n%s", out)
	}
}

func readProcCmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// startTTOUJob starts, from an interactive shell, `distlock run KEY --
// COMMAND &`: a background job whose COMMAND sets the terminal's modes
// (stty, as vim, less or a readline program do on SIGCONT after bg), for
// which the kernel stops it with SIGTTOU. It returns COMMAND's pid once
// COMMAND is stopped.
func startTTOUJob(t *testing.T, sh *shell, key string) int {
	t.Helper()
	sh.typ(t, `"$DL" run --ttl 1s `+key+` -- sh -c 'echo $$ > cmd.pid; sleep 0.3; exec stty -echo' &`+"\n")
	sh.expect(t, prompt, 10*time.Second)
	pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(sh.dir, "cmd.pid"), 10*time.Second)))
	for deadline := time.Now().Add(10 * time.Second); processState(pid) != "T"; time.Sleep(5 * time.Millisecond) { // polling another process's state
		if time.Now().After(deadline) {
			t.Fatalf("COMMAND (stty from the background) in state %q, want T (stopped by SIGTTOU)", processState(pid))
		}
	}
	return pid
}

// TestTerminalBackgroundJobStoppedByTTOUShowsStopped: docs/cli.md: "At a
// terminal the command behaves as under flock(1)" and "A command that reads
// the terminal from the background stops (SIGTTIN) until you bring it
// forward, as any job does." A command that writes to (tostop) or sets the
// modes of the terminal from the background stops with SIGTTOU; the runner
// then stops its own group with that same signal (job.suspend), but the
// runner ignores SIGTTOU on a terminal (front.go), so it runs on: the
// shell shows the job Running while its COMMAND is stopped (flock's job
// shows "Stopped (tty output)").
func TestTerminalBackgroundJobStoppedByTTOUShowsStopped(t *testing.T) {
	env, c, _ := server(t)
	sh := startShell(t, env)
	startTTOUJob(t, sh, "term-ttou")
	waitHeld(t, c, "term-ttou")
	var jobs string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) { // polling the shell's view
		from := sh.seen
		sh.typ(t, "jobs\n")
		sh.expect(t, prompt, 10*time.Second)
		jobs = sh.out.String()[from:sh.seen]
		if strings.Contains(jobs, "Stopped") {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("COMMAND is stopped (SIGTTOU), but the shell sees its job as:\n%s", jobs)
}

// TestTerminalHangupReleasesJobStoppedByTTOU: docs/cli.md: "If the terminal goes
// away (a closed window, a dropped ssh connection), the hangup reaches the
// command, and the lock is released when the job is gone, not left to run
// out its --ttl; the keeper exits too"; and no lease may stay renewed for a
// job nobody can continue. Here COMMAND is a background job stopped by
// SIGTTOU that the shell believes running: on the hangup bash sends the
// job SIGHUP but no SIGCONT, the runner passes SIGHUP on without SIGCONT,
// and COMMAND stays stopped for good while the keeper renews the lock
// forever. (Under flock(1) the job is seen stopped and gets SIGHUP and
// SIGCONT, and ends.)
func TestTerminalHangupReleasesJobStoppedByTTOU(t *testing.T) {
	env, c, _ := server(t)
	sh := startShell(t, env)
	pid := startTTOUJob(t, sh, "term-ttou-hup")
	waitHeld(t, c, "term-ttou-hup")
	hangup(t, sh.master)
	ctx := ctxT(t, 30*time.Second)
	// --ttl 1s: 10 s is ten leases.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) { // polling another process's progress
		info, err := c.Inspect(ctx, "term-ttou-hup")
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock still held (renewed) 10s after the terminal hung up (--ttl 1s): %+v; COMMAND in state %q, keepers %v",
				info, processState(pid), processesWith(keeperCmd, "term-ttou-hup"))
		}
	}
}
