package search

// Glob is a shell pattern as find(1)'s -name and -path read it: fnmatch(3)
// with no flags in the C locale, byte by byte: '*' matches any bytes ('/'
// and a leading '.' included), '?' one byte, '[...]' one byte of a set
// ('!' or '^' negates; ranges; [:class:]), '\' quotes the next byte. A '['
// without its ']' is an ordinary byte. Fold (-iname, -ipath) ignores ASCII
// case.
type Glob struct {
	Pattern string
	Fold    bool
}

// Match reports whether s matches the pattern as a whole.
func (g Glob) Match(s string) bool { return match(g.Pattern, s, g.Fold) }

// MatchBytes is Match on bytes (a name in an index key), without copying
// them.
func (g Glob) MatchBytes(s []byte) bool { return match(g.Pattern, s, g.Fold) }

// LiteralStart returns the bytes every name the pattern matches starts
// with: those before its first special byte ("" with Fold).
func (g Glob) LiteralStart() string {
	if g.Fold {
		return ""
	}
	for i := 0; i < len(g.Pattern); i++ {
		switch g.Pattern[i] {
		case '*', '?', '[', '\\':
			return g.Pattern[:i]
		}
	}
	return g.Pattern
}

// LiteralEnd returns the bytes every name the pattern matches ends with:
// those after its last special byte ("" with Fold). ']' counts as special
// here, since it may close a bracket expression; a byte after a '\' is
// literal, so the escape itself ends the run.
func (g Glob) LiteralEnd() string {
	if g.Fold {
		return ""
	}
	for i := len(g.Pattern) - 1; i >= 0; i-- {
		switch g.Pattern[i] {
		case '*', '?', '[', ']', '\\':
			return g.Pattern[i+1:]
		}
	}
	return g.Pattern
}

// Literal reports whether the pattern has no special byte, so that it
// matches exactly itself (without Fold).
func (g Glob) Literal() bool {
	for i := 0; i < len(g.Pattern); i++ {
		switch g.Pattern[i] {
		case '*', '?', '[', '\\':
			return false
		}
	}
	return !g.Fold
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// match is fnmatch with backtracking over the last '*' only, which is
// enough: a later '*' can always absorb what an earlier one would.
func match[S string | []byte](p string, s S, fold bool) bool {
	var starP, starS = -1, 0
	pi, si := 0, 0
	for si < len(s) {
		if pi < len(p) {
			switch c := p[pi]; c {
			case '*':
				for pi < len(p) && p[pi] == '*' {
					pi++
				}
				starP, starS = pi, si
				continue
			case '?':
				pi++
				si++
				continue
			case '[':
				if ok, n, valid := matchClass(p[pi:], s[si], fold); valid {
					if ok {
						pi += n
						si++
						continue
					}
				} else if s[si] == '[' {
					pi++
					si++
					continue
				}
			case '\\':
				if pi+1 < len(p) {
					if eq(p[pi+1], s[si], fold) {
						pi += 2
						si++
						continue
					}
				} else if s[si] == '\\' {
					pi++
					si++
					continue
				}
			default:
				if eq(c, s[si], fold) {
					pi++
					si++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		starS++
		pi, si = starP, starS
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

func eq(a, b byte, fold bool) bool { return a == b || fold && lower(a) == lower(b) }

// matchClass matches c against the bracket expression at the start of p.
// valid is false if p has no closing ']' (then '[' is an ordinary byte);
// n is the expression's length.
func matchClass(p string, c byte, fold bool) (ok bool, n int, valid bool) {
	i := 1
	neg := false
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		neg = true
		i++
	}
	first := true
	for {
		if i >= len(p) {
			return false, 0, false
		}
		b := p[i]
		if b == ']' && !first {
			return ok != neg, i + 1, true
		}
		first = false
		if b == '[' && i+1 < len(p) && p[i+1] == ':' {
			if end := classEnd(p, i+2); end > 0 {
				if inClass(p[i+2:end], c, fold) {
					ok = true
				}
				i = end + 2
				continue
			}
		}
		if b == '\\' && i+1 < len(p) {
			i++
			b = p[i]
		}
		lo := b
		i++
		if i+1 < len(p) && p[i] == '-' && p[i+1] != ']' {
			hi := p[i+1]
			i += 2
			if hi == '\\' && i < len(p) {
				hi = p[i]
				i++
			}
			if lo <= c && c <= hi || fold && (lo <= lower(c) && lower(c) <= hi || lo <= upper(c) && upper(c) <= hi) {
				ok = true
			}
			continue
		}
		if eq(lo, c, fold) {
			ok = true
		}
	}
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

// classEnd returns the index of the ":]" closing a class name that starts
// at i, or -1.
func classEnd(p string, i int) int {
	for j := i; j+1 < len(p); j++ {
		if p[j] == ':' && p[j+1] == ']' {
			return j
		}
		if p[j] < 'a' || p[j] > 'z' {
			return -1
		}
	}
	return -1
}

func inClass(name string, c byte, fold bool) bool {
	switch name {
	case "alpha":
		return 'a' <= lower(c) && lower(c) <= 'z'
	case "digit":
		return '0' <= c && c <= '9'
	case "alnum":
		return 'a' <= lower(c) && lower(c) <= 'z' || '0' <= c && c <= '9'
	case "upper":
		return 'A' <= c && c <= 'Z' || fold && 'a' <= c && c <= 'z'
	case "lower":
		return 'a' <= c && c <= 'z' || fold && 'A' <= c && c <= 'Z'
	case "space":
		return c == ' ' || '\t' <= c && c <= '\r'
	case "blank":
		return c == ' ' || c == '\t'
	case "punct":
		return c > ' ' && c < 0x7f && !('a' <= lower(c) && lower(c) <= 'z' || '0' <= c && c <= '9')
	case "print":
		return c >= ' ' && c < 0x7f
	case "graph":
		return c > ' ' && c < 0x7f
	case "cntrl":
		return c < ' ' || c == 0x7f
	case "xdigit":
		return '0' <= c && c <= '9' || 'a' <= lower(c) && lower(c) <= 'f'
	}
	return false
}
