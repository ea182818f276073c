package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// shell is an interactive bash with job control on a pseudo-terminal, as a
// user at a terminal has it: the test types into the terminal and reads
// what it shows.
type shell struct {
	master *os.File
	out    lockedBuffer // everything the terminal showed
	seen   int          // how much of out expect has consumed
	dir    string
}

const prompt = "PROMPT> "

func startShell(t *testing.T, env []string) *shell {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is needed to drive a terminal job: %v", err)
	}
	master, slave := openPTY(t)
	s := &shell{master: master, dir: t.TempDir()}
	cmd := exec.Command(bash, "--norc", "--noprofile", "--noediting", "-i")
	cmd.Dir = s.dir
	cmd.Env = append(cleanEnv(), append(env, "PS1="+prompt, "TERM=dumb", "HISTFILE=/dev/null", "DL="+binary(t))...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// A session of its own with the pseudo-terminal as its controlling
	// terminal: bash then does job control as in a terminal window.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			s.out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		// Everything in the terminal's session, including a job that a
		// broken distlock left stuck: the reader gets EOF only once no
		// process has the terminal open.
		killSession(cmd.Process.Pid)
		_ = cmd.Wait()
		select {
		case <-copied:
		case <-time.After(10 * time.Second):
			// A process outside the session still has the terminal open:
			// a keeper that a broken distlock left stopped. Closing
			// master ends the read.
			t.Errorf("the terminal is still open 10s after its session was killed")
		}
		master.Close()
	})
	s.expect(t, prompt, 10*time.Second)
	return s
}

// typ types text on the terminal's keyboard.
func (s *shell) typ(t *testing.T, text string) {
	t.Helper()
	if _, err := s.master.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
}

// expect waits until the terminal shows want after what earlier expects
// consumed, and consumes up to its end.
func (s *shell) expect(t *testing.T, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		out := s.out.String()
		if i := strings.Index(out[s.seen:], want); i >= 0 {
			s.seen += i + len(want)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("terminal did not show %q within %v; it shows:\n%s", want, within, out[s.seen:])
		}
		time.Sleep(5 * time.Millisecond) // polling the terminal's output
	}
}

// waitHeld waits until key is held and returns the holder's fence.
func waitHeld(t *testing.T, c *distlock.Client, key string) int64 {
	t.Helper()
	ctx := ctxT(t, 20*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Held() {
			return info.Fence
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q not taken within 10s", key)
		}
		time.Sleep(5 * time.Millisecond) // polling another process's progress
	}
}

// TestTerminalJob (issue 10, item 2): at a terminal, COMMAND behaves as
// under flock(1): it reads the terminal, Ctrl-C reaches it, and Ctrl-Z
// suspends the whole job, which keeps its lock while suspended and resumes
// on fg.
// keepsLock checks, for span, that the lock key stays held with fence:
// what, a job in some state, keeps its lock.
func keepsLock(t *testing.T, c *distlock.Client, key string, fence int64, span time.Duration, what string) {
	t.Helper()
	ctx := ctxT(t, span+10*time.Second)
	for end := time.Now().Add(span); time.Now().Before(end); time.Sleep(50 * time.Millisecond) { // sampling over a span of time
		info, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held() || info.Fence != fence {
			t.Fatalf("%s lost its lock: %+v (fence was %d)", what, info, fence)
		}
	}
}

// fgReads brings the job that holds key forward with fg, types line, which
// the job's command echoes as "got:<line>" before it exits 0, and checks
// that the lock is then released.
func fgReads(t *testing.T, sh *shell, c *distlock.Client, key, line string) {
	t.Helper()
	sh.typ(t, "fg\n")
	sh.typ(t, line+"\n")
	sh.expect(t, "got:"+line, 10*time.Second)
	sh.expect(t, prompt, 10*time.Second)
	sh.typ(t, `echo "rc=$?"`+"\n")
	sh.expect(t, "rc=0", 10*time.Second)
	if info, err := c.Inspect(ctxT(t, 5*time.Second), key); err != nil || info.Held() {
		t.Fatalf("after the job: %+v %v, want released", info, err)
	}
}

func TestTerminalJob(t *testing.T) {
	env, c, _ := server(t)

	t.Run("reads the terminal", func(t *testing.T) {
		sh := startShell(t, env)
		sh.typ(t, `"$DL" run tty-read -- sh -c 'read x; echo "got:$x"'; echo "rc=$?"`+"\n")
		waitHeld(t, c, "tty-read")
		sh.typ(t, "hello\n")
		sh.expect(t, "got:hello", 10*time.Second)
		sh.expect(t, "rc=0", 10*time.Second)
	})

	t.Run("Ctrl-C", func(t *testing.T) {
		sh := startShell(t, env)
		sh.typ(t, `"$DL" run tty-int -- cat`+"\n")
		waitHeld(t, c, "tty-int")
		sh.typ(t, "ping\n")
		sh.expect(t, "ping\r\nping\r\n", 10*time.Second) // the echo, then cat's copy
		sh.typ(t, "\x03")
		sh.expect(t, prompt, 10*time.Second)
		// 130: cat died of SIGINT, and distlock with it, as flock would.
		sh.typ(t, `echo "rc=$?"`+"\n")
		sh.expect(t, "rc=130", 10*time.Second)
		if info, err := c.Inspect(ctxT(t, 5*time.Second), "tty-int"); err != nil || info.Held() {
			t.Fatalf("after Ctrl-C: %+v %v, want released", info, err)
		}
	})

	t.Run("Ctrl-Z and fg", func(t *testing.T) {
		sh := startShell(t, env)
		const ttl = time.Second
		sh.typ(t, `"$DL" run --ttl 1s tty-stop -- sh -c 'echo $$ > cmd.pid; read x; echo "got:$x"'`+"\n")
		fence := waitHeld(t, c, "tty-stop")
		pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(sh.dir, "cmd.pid"), 10*time.Second)))
		sh.typ(t, "\x1a")
		sh.expect(t, "Stopped", 10*time.Second)
		sh.expect(t, prompt, 10*time.Second)
		if st := processState(pid); st != "T" {
			t.Fatalf("COMMAND in state %q after Ctrl-Z, want T (stopped)", st)
		}
		// Suspended for three leases: the lock stays with the job.
		keepsLock(t, c, "tty-stop", fence, 3*ttl, "suspended job")
		if st := processState(pid); st != "T" {
			t.Fatalf("COMMAND in state %q while the job is suspended, want T", st)
		}
		fgReads(t, sh, c, "tty-stop", "again")
	})

	t.Run("bg, a read from the background, and fg", func(t *testing.T) {
		// docs/cli.md: "bg resumes it in the background. A command that
		// reads the terminal from the background stops (SIGTTIN) until
		// you bring it forward, as any job does." COMMAND waits for a
		// line on the pipe go, so that it reads the terminal only once
		// resumed in the background; the keeper renews the lock meanwhile.
		// (Not a loop of sleeps: Ctrl-Z in the moment between a shell's
		// vfork and its child's exec stops the child, while the shell
		// waits for that exec and cannot stop, so the job never stops.
		// Load made that moment likely; a terminal user could meet it too,
		// with any shell script, distlock or not.)
		sh := startShell(t, env)
		const ttl = time.Second
		goPipe := filepath.Join(sh.dir, "go")
		if err := syscall.Mkfifo(goPipe, 0o600); err != nil {
			t.Fatal(err)
		}
		sh.typ(t, `"$DL" run --ttl 1s tty-bg -- sh -c 'echo $$ > cmd.pid; read g < go; echo x > reading; read x; echo "got:$x"'`+"\n")
		fence := waitHeld(t, c, "tty-bg")
		pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(sh.dir, "cmd.pid"), 10*time.Second)))
		ctx := ctxT(t, 30*time.Second)
		info, err := c.Inspect(ctx, "tty-bg")
		if err != nil {
			t.Fatal(err)
		}
		runner, _ := strconv.Atoi(metaFields(info.Meta)["pid"])
		sh.typ(t, "\x1a")
		sh.expect(t, "Stopped", 10*time.Second)
		sh.expect(t, prompt, 10*time.Second)
		if st := processState(pid); st != "T" {
			t.Fatalf("COMMAND in state %q after Ctrl-Z, want T (stopped)", st)
		}
		// Read-write, so that the open does not wait for COMMAND (stopped
		// before or in its open of go), and kept open, so that the line
		// stays in the pipe until COMMAND reads it.
		goW, err := os.OpenFile(goPipe, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer goW.Close()
		if _, err := goW.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
		// bash's bg: SIGCONT to the job's process group, the terminal
		// left with the shell. COMMAND runs on (it writes reading), reads
		// the terminal and is stopped by SIGTTIN, and so is distlock.
		sh.typ(t, "bg\n")
		waitFile(t, filepath.Join(sh.dir, "reading"), 10*time.Second)
		for deadline := time.Now().Add(10 * time.Second); processState(pid) != "T" || processState(runner) != "T"; time.Sleep(5 * time.Millisecond) { // polling other processes' state
			if time.Now().After(deadline) {
				t.Fatalf("reading the terminal from the background: COMMAND in state %q, distlock in %q; want T (stopped)", processState(pid), processState(runner))
			}
		}
		// The signal that stopped the job, as the shell saw it (bash
		// names it in POSIX mode only). /proc shows distlock's main thread
		// stopped a moment before the whole process is and the shell
		// hears of it: asked until it knows.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) { // polling the shell's view
			from := sh.seen
			sh.typ(t, "set -o posix; jobs; set +o posix\n")
			sh.expect(t, prompt, 10*time.Second)
			jobs := sh.out.String()[from:sh.seen]
			if strings.Contains(jobs, "Stopped(SIGTTIN)") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the shell does not see the job stopped by SIGTTIN:\n%s", jobs)
			}
		}
		// Stopped for three leases: the lock stays with the job, renewed.
		keepsLock(t, c, "tty-bg", fence, 3*ttl, "job stopped by SIGTTIN")
		if st := processState(pid); st != "T" {
			t.Fatalf("COMMAND in state %q while stopped for reading the terminal, want T", st)
		}
		// fg: the terminal to the job's group, and SIGCONT. COMMAND gets
		// the terminal and reads what is typed.
		fgReads(t, sh, c, "tty-bg", "forward")
	})

	t.Run("loss while suspended", func(t *testing.T) {
		sh := startShell(t, env)
		sh.typ(t, `"$DL" run --ttl 1s --grace 1s tty-loss -- sh -c 'echo $$ > cmd.pid; read x'`+"\n")
		waitHeld(t, c, "tty-loss")
		pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(sh.dir, "cmd.pid"), 10*time.Second)))
		sh.typ(t, "\x1a")
		sh.expect(t, "Stopped", 10*time.Second)
		removed, err := c.ForceRelease(ctxT(t, 5*time.Second), "tty-loss", 0)
		if err != nil {
			t.Fatal(err)
		}
		runner, _ := strconv.Atoi(metaFields(removed.Meta)["pid"])
		// Noticed at the next renewal; the stopped job is continued and
		// terminated, and the shell reports its status 79.
		sh.expect(t, `lock "tty-loss" lost`, 10*time.Second)
		waitDead(t, pid, 10*time.Second, time.Now())
		// Reaped by the shell, which has then noted the job's status.
		for deadline := time.Now().Add(10 * time.Second); processState(runner) != ""; time.Sleep(5 * time.Millisecond) { // polling another process's state
			if time.Now().After(deadline) {
				t.Fatalf("distlock still there (state %s)", processState(runner))
			}
		}
		sh.typ(t, "jobs\n")
		sh.expect(t, "Exit 79", 10*time.Second)
	})
}

// TestTerminalPipeline: distlock as a stage of a shell pipeline at a
// terminal shares the shell's job, its process group, with the other
// stages. The terminal stays with that job, so that another stage may read
// it (less): taken for COMMAND, it put them in the background, where such a
// read stopped the job, distlock with it, while COMMAND ran on and the lock
// stayed held after it. COMMAND still gets the terminal when it reads it,
// and Ctrl-Z, fg and Ctrl-C, which reach the job, are passed on to it.
func TestTerminalPipeline(t *testing.T) {
	env, c, _ := server(t)
	released := func(t *testing.T, key string) {
		t.Helper()
		if info, err := c.Inspect(ctxT(t, 5*time.Second), key); err != nil || info.Held() {
			t.Fatalf("after the pipeline: %+v %v, want released", info, err)
		}
	}

	t.Run("another stage reads the terminal", func(t *testing.T) {
		sh := startShell(t, env)
		// COMMAND runs until the second stage has read a line from the
		// terminal, which it starts to do once COMMAND runs.
		sh.typ(t, `"$DL" run tty-pipe -- sh -c 'echo x > started; while [ ! -e done ]; do sleep 0.01; done; exit 3' | `+
			`sh -c 'while [ ! -e started ]; do sleep 0.01; done; read x </dev/tty; touch done; echo "got:$x"'; echo "rc=${PIPESTATUS[0]}"`+"\n")
		waitFile(t, filepath.Join(sh.dir, "started"), 10*time.Second)
		sh.typ(t, "typed\n")
		sh.expect(t, "got:typed", 10*time.Second)
		sh.expect(t, "rc=3", 10*time.Second)
		released(t, "tty-pipe")
	})

	t.Run("the command reads the terminal", func(t *testing.T) {
		sh := startShell(t, env)
		sh.typ(t, `"$DL" run tty-pipe-read -- sh -c 'read x; echo "got:$x"; exit 3' | cat; echo "rc=${PIPESTATUS[0]}"`+"\n")
		waitHeld(t, c, "tty-pipe-read")
		sh.typ(t, "hello\n")
		sh.expect(t, "got:hello", 10*time.Second)
		sh.expect(t, "rc=3", 10*time.Second)
		released(t, "tty-pipe-read")
	})

	t.Run("Ctrl-Z, fg and Ctrl-C", func(t *testing.T) {
		sh := startShell(t, env)
		const ttl = time.Second
		sh.typ(t, `"$DL" run --ttl 1s tty-pipe-stop -- sh -c 'echo $$ > cmd.pid; exec sleep 60' | cat`+"\n")
		fence := waitHeld(t, c, "tty-pipe-stop")
		pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(sh.dir, "cmd.pid"), 10*time.Second)))
		for deadline := time.Now().Add(10 * time.Second); processState(pid) != "S"; time.Sleep(5 * time.Millisecond) { // polling another process's state
			if time.Now().After(deadline) {
				t.Fatalf("COMMAND in state %q, want S (sleeping)", processState(pid))
			}
		}
		sh.typ(t, "\x1a")
		sh.expect(t, "Stopped", 10*time.Second)
		sh.expect(t, prompt, 10*time.Second)
		if st := processState(pid); st != "T" {
			t.Fatalf("COMMAND in state %q after Ctrl-Z, want T (stopped)", st)
		}
		keepsLock(t, c, "tty-pipe-stop", fence, 3*ttl, "suspended pipeline")
		sh.typ(t, "fg\n")
		for deadline := time.Now().Add(10 * time.Second); processState(pid) != "S"; time.Sleep(5 * time.Millisecond) { // polling another process's state
			if time.Now().After(deadline) {
				t.Fatalf("COMMAND in state %q after fg, want S (sleeping)", processState(pid))
			}
		}
		keepsLock(t, c, "tty-pipe-stop", fence, ttl, "resumed pipeline")
		// Ctrl-C reaches the job, cat and distlock, which passes it on.
		sh.typ(t, "\x03")
		sh.expect(t, prompt, 10*time.Second)
		waitDead(t, pid, 10*time.Second, time.Now())
		released(t, "tty-pipe-stop")
	})
}

// TestTerminalHangup: when the terminal goes away (a closed window, a
// dropped ssh connection) while the job runs, the hangup reaches COMMAND,
// and the lock is released, not left to run out its --ttl, by a keeper
// that then exits.
func TestTerminalHangup(t *testing.T) {
	env, c, _ := server(t)
	sh := startShell(t, env)
	sh.typ(t, `"$DL" run --ttl 1m tty-hup -- sh -c 'echo $$ > cmd.pid; trap "exit 9" HUP; while :; do sleep 0.02; done'`+"\n")
	waitHeld(t, c, "tty-hup")
	pid, _ := strconv.Atoi(strings.TrimSpace(waitFile(t, filepath.Join(sh.dir, "cmd.pid"), 10*time.Second)))
	hangup(t, sh.master)
	waitDead(t, pid, 10*time.Second, time.Now())
	ctx := ctxT(t, 20*time.Second)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) { // polling another process's progress
		info, err := c.Inspect(ctx, "tty-hup")
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock still held 10s after the hangup (--ttl 1m): %+v", info)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); len(processesWith(keeperCmd, "tty-hup")) > 0; time.Sleep(5 * time.Millisecond) { // polling other processes' state
		if time.Now().After(deadline) {
			t.Fatalf("keeper still running 10s after the hangup: %v", processesWith(keeperCmd, "tty-hup"))
		}
	}
}

// hangup hangs the terminal whose master end is master up, as a closed
// terminal window or a dropped ssh connection does: the last close of the
// master end hangs the terminal up (SIGHUP to the session's leader and
// its foreground job). The reader of master returns then: master is
// pollable, as openPTY leaves it.
func hangup(t *testing.T, master *os.File) {
	t.Helper()
	if err := master.Close(); err != nil {
		t.Fatal(err)
	}
}

// processesWith returns the processes whose command line has all of args.
func processesWith(args ...string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || processDead(pid) {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		all := true
		for _, a := range args {
			all = all && strings.Contains("\x00"+string(b), "\x00"+a+"\x00")
		}
		if all {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killSession kills every process of session sid.
func killSession(sid int) {
	procs, _ := processes()
	for _, p := range procs {
		if p.session == sid {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
}

// TestVerboseOnTerminal (issue 10, item 3): on a terminal -v also shows
// for how long it has waited, on one line that it rewrites.
func TestVerboseOnTerminal(t *testing.T) {
	env, c, _ := server(t)
	ctx := ctxT(t, 20*time.Second)
	l, err := c.TryLock(ctx, "tty-wait", distlock.WithMetadata("host=other pid=1"))
	if err != nil {
		t.Fatal(err)
	}
	sh := startShell(t, env)
	sh.typ(t, `"$DL" run -v --wait 20s tty-wait -- echo ran; echo "rc=$?"`+"\n")
	sh.expect(t, "host=other pid=1", 10*time.Second)
	sh.expect(t, "\r\033[Kdistlock run: waiting for \"tty-wait\": 1s", 10*time.Second)
	sh.expect(t, "\r\033[Kdistlock run: waiting for \"tty-wait\": 2s", 10*time.Second)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	sh.expect(t, `took "tty-wait"`, 10*time.Second)
	sh.expect(t, "ran", 10*time.Second)
	sh.expect(t, "rc=0", 10*time.Second)
	if n := strings.Count(sh.out.String(), "host=other pid=1"); n != 1 {
		t.Fatalf("holder named %d times:\n%s", n, sh.out.String())
	}
}
