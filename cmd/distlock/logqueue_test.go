package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatedWriter takes no writes until open is closed, as a stderr stopped
// with Ctrl-S; entered is closed when the first write arrives.
type gatedWriter struct {
	open, entered chan struct{}
	once          sync.Once
	mu            sync.Mutex
	b             strings.Builder
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.open
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *gatedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestLogQueueNeverBlocks: runLog's writes never wait for stderr. With
// stderr blocked they queue, up to logQueueLen, and the rest are dropped
// and counted; a flush gives up after its bound; once stderr takes writes,
// the queued messages come out in order, then how many were dropped.
func TestLogQueueNeverBlocks(t *testing.T) {
	w := &gatedWriter{open: make(chan struct{}), entered: make(chan struct{})}
	q := newLogQueue(w)
	const extra = 10
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		fmt.Fprintf(q, "m0\n")
		<-w.entered // the writer holds m0, blocked: the queue is empty
		for i := 1; i <= logQueueLen+extra; i++ {
			fmt.Fprintf(q, "m%d\n", i)
		}
	}()
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("Write blocked on a writer that takes no writes")
	}
	if q.flush(10 * time.Millisecond) {
		t.Fatal("flush reported the queue written while the writer is blocked")
	}
	close(w.open)
	if !q.flush(10 * time.Second) {
		t.Fatal("flush timed out on a writer that takes writes")
	}
	var want strings.Builder
	for i := 0; i <= logQueueLen; i++ {
		fmt.Fprintf(&want, "m%d\n", i)
	}
	fmt.Fprintf(&want, "distlock: %d messages dropped: stderr took no writes\n", extra)
	if got := w.String(); got != want.String() {
		t.Fatalf("written:\n%s\nwant:\n%s", got, want.String())
	}
}

// TestRunLogDropped: the message that says how many were dropped is in the
// run's format: a text line, or a JSON `dropped` event as docs/cli.md's
// table gives it.
func TestRunLogDropped(t *testing.T) {
	for _, format := range []logFormat{logText, logJSON} {
		t.Run(string(format), func(t *testing.T) {
			w := &gatedWriter{open: make(chan struct{}), entered: make(chan struct{})}
			l := newRunLog(format, runName, "k", w)
			const extra = 3
			wrote := make(chan struct{})
			go func() {
				defer close(wrote)
				l.info(evWaiting, "first")
				<-w.entered
				for range logQueueLen + extra {
					l.info(evWaiting, "more")
				}
			}()
			select {
			case <-wrote:
			case <-time.After(10 * time.Second):
				t.Fatal("runLog blocked on a stderr that takes no writes")
			}
			close(w.open)
			if !queueFor(w).flush(10 * time.Second) {
				t.Fatal("flush timed out on a writer that takes writes")
			}
			out := w.String()
			if format == logText {
				if want := fmt.Sprintf("distlock run: more\ndistlock run: %d messages dropped: stderr took no writes\n", extra); !strings.HasSuffix(out, want) {
					t.Fatalf("output ends %q, want %q", out[max(0, len(out)-200):], want)
				}
				return
			}
			msgs := jsonLines(t, out)
			if len(msgs) != 1+logQueueLen+1 {
				t.Fatalf("%d messages, want %d", len(msgs), 1+logQueueLen+1)
			}
			m := checkEvent(t, docEvents(t), msgs, evDropped)
			if index(msgs, evDropped) != len(msgs)-1 || m["dropped"] != float64(extra) || m["level"] != "WARN" || m["key"] != "k" {
				t.Fatalf("dropped message %v, want the last, with dropped %d", m, extra)
			}
		})
	}
}
