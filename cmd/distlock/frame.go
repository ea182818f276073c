package main

import (
	"bytes"
	"fmt"
	"syscall"
	"unicode/utf8"
	"unsafe"
)

// ANSI sequences of the screen view: the cursor to the top left corner,
// erase to the end of the line, erase to the end of the screen.
const (
	ansiHome      = "\033[H"
	ansiClearLine = "\033[K"
	ansiClearDown = "\033[J"
)

// frame is one redraw of the screen view: lines overwrite the previous
// frame in place, each erasing what is left of the old line after it, and
// the rest of the screen is erased below. Nothing is cleared first, so the
// terminal never shows a blank screen between frames (no flicker). Lines are
// cut to cols-1 characters and the frame to rows-1 lines (0: unknown, no
// limit), because a wrapped line or a scrolled screen would shift the next
// frame away from the top.
func frame(lines []string, cols, rows int) []byte {
	if rows > 2 && len(lines) > rows-1 {
		keep := rows - 2
		more := len(lines) - keep
		lines = append(lines[:keep:keep], fmt.Sprintf("... %d more lines (enlarge the window or give a PATTERN)", more))
	}
	var b bytes.Buffer
	b.WriteString(ansiHome)
	for _, l := range lines {
		b.WriteString(clip(l, cols-1))
		b.WriteString(ansiClearLine + "\n")
	}
	b.WriteString(ansiClearDown)
	return b.Bytes()
}

// clip cuts s to n characters, if n > 0. Characters are counted as one
// column each: wide characters may still wrap, which costs a misdrawn
// frame, not a wrong one.
func clip(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// windowSize returns the terminal's columns and rows, or zeros.
func windowSize(fd int) (cols, rows int) {
	if fd < 0 {
		return 0, 0
	}
	var ws struct{ rows, cols, x, y uint16 }
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGWINSZ, uintptr(unsafe.Pointer(&ws))); e != 0 {
		return 0, 0
	}
	return int(ws.cols), int(ws.rows)
}
