package main

import (
	"bytes"
	"io"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The messages of `distlock run` and `elect` (runLog, and the library's
// through it) never wait for stderr. stderr may take no writes for a long
// time: a terminal stopped with Ctrl-S, `distlock run k -- make 2>&1 |
// less`, a log collector that stalls. A write that blocked there would
// hold up what follows it, in the keeper signalling COMMAND after a loss
// or in the runner killing a stalled keeper, and COMMAND would run on
// without its lock. So a message goes into a bounded queue, which one
// goroutine per destination writes out in order; one that finds the queue
// full is dropped and counted, and the count is said (a `dropped` message)
// once the queue has drained. main waits a bounded time (exitFlush) for
// the queues to drain before the process exits.

// logQueueLen is how many messages wait for a stderr that takes no writes
// before further ones are dropped.
const logQueueLen = 256

// exitFlush bounds how long a process waits at exit for its messages to
// be written; syncFlush, how long the keeper waits for them before it
// lets COMMAND start (so that they come before COMMAND's output).
const (
	exitFlush = time.Second
	syncFlush = time.Second
)

// logQueue is an io.Writer whose Write never blocks: see above. Each Write
// is written out in one write, as given.
type logQueue struct {
	w       io.Writer
	q       chan logItem
	dropped atomic.Int64
	// note says that n messages were dropped, on w, in the format of the
	// messages (set by newRunLog); nil: a plain line.
	note atomic.Pointer[func(n int64)]
}

// logItem is a message, or, with done, a flush mark: done is closed once
// everything queued before it is written.
type logItem struct {
	b    []byte
	done chan struct{}
}

var (
	queuesMu sync.Mutex
	queues   []*logQueue
	queueOf  = map[io.Writer]*logQueue{}
)

// queueFor returns the queue to w: the same one for every use of the same
// writer (os.Stderr), so that the messages keep their order.
func queueFor(w io.Writer) *logQueue {
	if q, ok := w.(*logQueue); ok {
		return q
	}
	queuesMu.Lock()
	defer queuesMu.Unlock()
	comparable := reflect.TypeOf(w).Comparable()
	if comparable {
		if q := queueOf[w]; q != nil {
			return q
		}
	}
	q := newLogQueue(w)
	queues = append(queues, q)
	if comparable {
		queueOf[w] = q
	}
	return q
}

func newLogQueue(w io.Writer) *logQueue {
	q := &logQueue{w: w, q: make(chan logItem, logQueueLen)}
	go q.run()
	return q
}

// Write queues a copy of b, or drops it if the queue is full. It never
// fails: like the direct writes before it, a message that cannot be
// written is not the run's business.
func (q *logQueue) Write(b []byte) (int, error) {
	select {
	case q.q <- logItem{b: bytes.Clone(b)}:
	default:
		q.dropped.Add(1)
	}
	return len(b), nil
}

func (q *logQueue) run() {
	for it := range q.q {
		if it.b != nil {
			_, _ = q.w.Write(it.b)
		}
		if len(q.q) == 0 || it.done != nil {
			q.sayDropped()
		}
		if it.done != nil {
			close(it.done)
		}
	}
}

// sayDropped says how many messages were dropped since it last said so.
func (q *logQueue) sayDropped() {
	n := q.dropped.Swap(0)
	if n == 0 {
		return
	}
	if note := q.note.Load(); note != nil {
		(*note)(n)
		return
	}
	_, _ = io.WriteString(q.w, "distlock: "+droppedText(n)+"\n")
}

func droppedText(n int64) string {
	s := "s"
	if n == 1 {
		s = ""
	}
	return strconv.FormatInt(n, 10) + " message" + s + " dropped: stderr took no writes"
}

// flush waits, at most d, until what was queued before it is written, and
// tells whether it was.
func (q *logQueue) flush(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	done := make(chan struct{})
	select {
	case q.q <- logItem{done: done}:
	case <-t.C:
		return false
	}
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// flushLogs waits, at most d in all, until every message queued so far is
// written.
func flushLogs(d time.Duration) {
	queuesMu.Lock()
	qs := append([]*logQueue(nil), queues...)
	queuesMu.Unlock()
	deadline := time.Now().Add(d)
	for _, q := range qs {
		if !q.flush(time.Until(deadline)) {
			return
		}
	}
}
