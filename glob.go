package distlock

// Redis globs, matched in Go as Redis matches them: List promises names
// that match its pattern as a Redis glob, but SCAN can only match whole
// keys, so List checks each name again here. path.Match is no substitute:
// it knows no "[^", treats "\" in classes and malformed patterns
// differently, and is not byte-wise.

// globMatch reports whether s matches the Redis glob pattern as SCAN's
// MATCH would: a port of stringmatchlen (Redis' util.c), byte-wise and
// case-sensitive, malformed patterns included (an unclosed "[" runs to the
// end of the pattern, a trailing "\" is a plain backslash).
func globMatch(pattern, s string) bool {
	skipLonger := false
	return globMatchFrom(pattern, s, &skipLonger, 0)
}

// globMatchFrom is stringmatchlen_impl. skipLonger: the rest of the
// pattern after a "*" matched nowhere in the rest of s, so no earlier "*"
// need try a longer match either (it keeps matching linear in practice).
func globMatchFrom(p, s string, skipLonger *bool, nesting int) bool {
	if nesting > 1000 {
		return false // as Redis, which refuses to recurse deeper
	}
	for len(p) > 0 && len(s) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 1 && p[1] == '*' {
				p = p[1:]
			}
			if len(p) == 1 {
				return true
			}
			for ; len(s) > 0; s = s[1:] {
				if globMatchFrom(p[1:], s, skipLonger, nesting+1) {
					return true
				}
				if *skipLonger {
					return false
				}
			}
			*skipLonger = true
			return false
		case '?':
			p, s = p[1:], s[1:]
		case '[':
			var in bool
			in, p, _ = globClass(p[1:], s[0])
			if !in {
				return false
			}
			s = s[1:]
		default:
			if p[0] == '\\' && len(p) >= 2 {
				p = p[1:]
			}
			if p[0] != s[0] {
				return false
			}
			p, s = p[1:], s[1:]
		}
		if len(s) == 0 {
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
		}
	}
	return len(p) == 0 && len(s) == 0
}

// globClass reads a class, p starting just after its "[", as Redis does:
// it reports whether the class admits c, what follows it, and whether a
// "]" closed it (an unclosed class ends with the pattern). A range
// compares bytes as C chars, which are signed on amd64, where Redis
// mostly runs: it differs elsewhere only for bytes above 0x7f.
func globClass(p string, c byte) (in bool, rest string, closed bool) {
	not := len(p) > 0 && p[0] == '^'
	if not {
		p = p[1:]
	}
	for {
		switch {
		case len(p) == 0:
			return in != not, "", false
		case p[0] == '\\' && len(p) >= 2:
			in = in || p[1] == c
			p = p[2:]
		case p[0] == ']':
			return in != not, p[1:], true
		case len(p) >= 3 && p[1] == '-':
			lo, hi, x := int8(p[0]), int8(p[2]), int8(c)
			if lo > hi {
				lo, hi = hi, lo
			}
			in = in || (x >= lo && x <= hi)
			p = p[3:]
		default:
			in = in || p[0] == c
			p = p[1:]
		}
	}
}

// globSealed reports whether pattern means the same inside a longer glob:
// no unclosed "[" and no trailing "\", which would take in what follows.
func globSealed(pattern string) bool {
	p := pattern
	for len(p) > 0 {
		switch p[0] {
		case '\\':
			if len(p) < 2 {
				return false
			}
			p = p[2:]
		case '[':
			var closed bool
			if _, p, closed = globClass(p[1:], 0); !closed {
				return false
			}
		default:
			p = p[1:]
		}
	}
	return true
}
