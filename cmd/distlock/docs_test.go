package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDocs (issue 10, item 4): what the README, docs/cli.md and the help
// texts say agrees with go.mod, with each other and with what distlock does.
func TestDocs(t *testing.T) {
	readme := readFile(t, "../../README.md")
	cli := readFile(t, "../../docs/cli.md")
	gomod := readFile(t, "../../go.mod")

	t.Run("Go version", func(t *testing.T) {
		// The go line is the minimum every importer inherits.
		goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
		claim := regexp.MustCompile(`Go (\d+\.\d+) or later`).FindStringSubmatch(readme)
		if goLine == nil || claim == nil || goLine[1] != claim[1] {
			t.Fatalf("go.mod says %v, the README %v", goLine, claim)
		}
		if other := regexp.MustCompile(`Go \(?(≥|>=)`).FindString(readme + cli); other != "" {
			t.Fatalf("another Go minimum in the docs: %q", other)
		}
	})

	t.Run("exit status", func(t *testing.T) {
		code, help, _ := dl(t, nil, "help", "exit-codes")
		if code != 0 {
			t.Fatalf("help exit-codes: exit %d", code)
		}
		var helpCodes, docCodes []string
		for _, line := range strings.Split(help, "\n") {
			// "  CODE  meaning", continued on lines indented further.
			if f := strings.Fields(line); strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") && len(f) > 1 {
				helpCodes = append(helpCodes, f[0])
			}
		}
		_, table, _ := strings.Cut(cli, "## Exit status")
		for _, m := range regexp.MustCompile(`(?m)^\| ([^ |]+) \|`).FindAllStringSubmatch(table, -1) {
			if m[1] != "code" && !strings.HasPrefix(m[1], "-") {
				docCodes = append(docCodes, m[1])
			}
			if len(docCodes) == len(helpCodes) {
				break
			}
		}
		if strings.Join(helpCodes, " ") != strings.Join(docCodes, " ") {
			t.Fatalf("distlock help exit-codes lists %v, docs/cli.md %v", helpCodes, docCodes)
		}
	})

	t.Run("consul and etcdctl", func(t *testing.T) {
		// consul lock stops its command on loss (SIGTERM, SIGKILL after
		// 5s); etcdctl lock does not.
		for name, doc := range map[string]string{"README.md": readme, "docs/cli.md": cli} {
			if strings.Contains(doc, "Unlike `etcdctl lock` and `consul lock`") {
				t.Errorf("%s says consul lock does not stop its command", name)
			}
		}
		if !strings.Contains(cli, "Like `consul lock` (SIGTERM, then SIGKILL after\n5 s) and unlike `etcdctl lock`") {
			t.Errorf("docs/cli.md does not compare with consul lock and etcdctl lock")
		}
	})

	t.Run("queued counts plain waiters", func(t *testing.T) {
		env, c, _ := server(t)
		ctx := ctxT(t, 20*time.Second)
		l, err := c.TryLock(ctx, "line")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		for range 2 { // plain waiters, not --fair
			startDL(t, t.TempDir(), env, "run", "line", "--", "true")
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, out, stderr := dl(t, env, "status", "--json", "line")
			var st struct {
				Locks []lockJSON `json:"locks"`
			}
			if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Locks) != 1 {
				t.Fatalf("status: exit %d, %v, %q %q", code, err, out, stderr)
			}
			if st.Locks[0].Queued == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("queued %d, want the 2 plain waiters", st.Locks[0].Queued)
			}
			time.Sleep(20 * time.Millisecond) // polling other processes' progress
		}
		_, help, _ := dl(t, nil, "status", "--help")
		if strings.Contains(help, "fair-mode") || !strings.Contains(help, "every\n                            single-node waiter, --fair or not") {
			t.Fatalf("status --help does not say that queued counts every waiter:\n%s", help)
		}
	})
}
