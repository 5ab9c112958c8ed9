package search

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/weftfs/weft/internal/core"
	"github.com/weftfs/weft/internal/errs"
)

// Expr is a parsed weft find command line.
type Expr struct {
	Paths  []string // starting points; "/" if none was given
	Query  Query
	Print0 bool // -print0: names end with NUL instead of newline
	Ls     bool // -ls: find's long listing
	JSON   bool // --json: one JSON object per line
}

// Env is what parsing needs from outside: the time find starts at, and
// lookups of users, groups and -newer's reference file.
type Env struct {
	NowNs       int64
	LookupUser  func(name string) (uint32, bool)
	LookupGroup func(name string) (uint32, bool)
	// MtimeOf returns the mtime (ns) of a file of the file system.
	MtimeOf func(path string) (int64, error)
}

// Windows of -mtime and -mmin.
const (
	daySecs = 86400
	minSecs = 60
	second  = int64(1e9)
)

// Parse reads find's arguments: starting points, then tests combined with
// AND (an explicit -a or -and is allowed) and the output options. What
// GNU find would refuse is refused with errs.Invalid and a message in its
// words.
func Parse(args []string, env Env) (*Expr, error) {
	e := &Expr{}
	i := 0
	for ; i < len(args) && !isTest(args[i]); i++ {
		e.Paths = append(e.Paths, args[i])
	}
	if len(e.Paths) == 0 {
		e.Paths = []string{"/"}
	}
	for i < len(args) {
		a := args[i]
		i++
		arg := func() (string, error) {
			if i >= len(args) {
				return "", invalid("missing argument to `%s'", a)
			}
			i++
			return args[i-1], nil
		}
		if err := e.parseOne(a, arg, env); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// isTest reports whether a starts the expression (find: a word that begins
// with '-', or is '(' or '!').
func isTest(a string) bool {
	return len(a) > 1 && a[0] == '-' || a == "(" || a == "!" || a == ","
}

func invalid(format string, a ...any) error {
	return errs.New(errs.Invalid, "find", format, a...)
}

func (e *Expr) parseOne(a string, arg func() (string, error), env Env) error {
	q := &e.Query
	switch a {
	case "-a", "-and":
		return nil
	case "-print":
		return nil
	case "-print0":
		e.Print0 = true
		return nil
	case "-ls":
		e.Ls = true
		return nil
	case "--json", "-json":
		e.JSON = true
		return nil
	case "-o", "-or", "!", "-not", "(", ")", ",":
		return invalid("operator %s is not supported: tests combine with AND only", a)
	}
	v, err := arg()
	if err != nil {
		return err
	}
	switch a {
	case "-name", "-iname":
		q.Names = append(q.Names, Glob{Pattern: v, Fold: a == "-iname"})
	case "-path", "-ipath", "-wholename", "-iwholename":
		q.Paths = append(q.Paths, Glob{Pattern: v, Fold: a[1] == 'i'})
	case "-type":
		set, err := parseType(v)
		if err != nil {
			return err
		}
		q.Types = append(q.Types, set)
	case "-size":
		r, err := parseSize(v)
		if err != nil {
			return err
		}
		q.Sizes = append(q.Sizes, r)
	case "-mtime", "-mmin":
		r, err := parseTime(a, v, env.NowNs)
		if err != nil {
			return err
		}
		q.Mtimes = append(q.Mtimes, r)
	case "-newer":
		if env.MtimeOf == nil {
			return invalid("-newer: no file system to read %s from", v)
		}
		t, err := env.MtimeOf(v)
		if err != nil {
			return err
		}
		q.Mtimes = append(q.Mtimes, Range{Lo: t + 1, Hi: math.MaxInt64})
	case "-user", "-uid":
		id, err := parseID(a, v, env.LookupUser)
		if err != nil {
			return err
		}
		q.Uids = append(q.Uids, id)
	case "-group", "-gid":
		id, err := parseID(a, v, env.LookupGroup)
		if err != nil {
			return err
		}
		q.Gids = append(q.Gids, id)
	case "-perm":
		p, err := parsePerm(v)
		if err != nil {
			return err
		}
		q.Perms = append(q.Perms, p)
	case "-xattr":
		if v == "" || len(v) > 255 {
			return invalid("-xattr: bad extended attribute name %q", v)
		}
		q.Xattrs = append(q.Xattrs, v)
	default:
		return invalid("unknown predicate `%s'", a)
	}
	return nil
}

// parseType reads -type's letters, one or a comma-separated list.
func parseType(v string) (uint32, error) {
	types := map[string]uint32{
		"f": core.ModeFile, "d": core.ModeDir, "l": core.ModeLink,
		"b": core.ModeBlock, "c": core.ModeChar, "p": core.ModeFIFO, "s": core.ModeSocket,
	}
	var set uint32
	for _, t := range strings.Split(v, ",") {
		m, ok := types[t]
		if !ok {
			if t == "" {
				return 0, invalid("Arguments to -type should contain at least one letter")
			}
			return 0, invalid("Unknown argument to -type: %s", t)
		}
		if set&TypeBit(m) != 0 {
			return 0, invalid("Duplicate file type '%s' in the argument list to -type.", t)
		}
		set |= TypeBit(m)
	}
	return set, nil
}

// sign splits a leading '+' or '-' off a numeric argument.
func sign(v string) (byte, string) {
	if v != "" && (v[0] == '+' || v[0] == '-') {
		return v[0], v[1:]
	}
	return 0, v
}

// parseSize reads -size [+-]N[cwbkMG]: the size is rounded up to units
// (512-byte blocks without a suffix) before it is compared with N.
func parseSize(v string) (Range, error) {
	s, num := sign(v)
	unit := int64(512)
	if num != "" {
		switch num[len(num)-1] {
		case 'c':
			unit = 1
		case 'w':
			unit = 2
		case 'b':
			unit = 512
		case 'k':
			unit = 1 << 10
		case 'M':
			unit = 1 << 20
		case 'G':
			unit = 1 << 30
		}
		if num[len(num)-1] < '0' || num[len(num)-1] > '9' {
			num = num[:len(num)-1]
		}
	}
	n, err := strconv.ParseUint(num, 10, 63)
	if err != nil || num == "" || num[0] < '0' || num[0] > '9' {
		return Range{}, invalid("invalid -size argument `%s'", v)
	}
	largest := int64(math.MaxInt64)
	// units(size) = ceil(size / unit); the ranges below are its inverse.
	upTo := func(k uint64) int64 { // the largest size of at most k units
		if k > uint64(largest/unit) {
			return largest
		}
		return int64(k) * unit
	}
	switch s {
	case '+':
		if upTo(n) == largest {
			return Range{1, 0}, nil
		}
		return Range{upTo(n) + 1, largest}, nil
	case '-':
		if n == 0 {
			return Range{1, 0}, nil
		}
		return Range{0, upTo(n - 1)}, nil
	}
	if n == 0 {
		return Range{0, 0}, nil
	}
	if upTo(n-1) == largest {
		return Range{1, 0}, nil
	}
	return Range{upTo(n-1) + 1, upTo(n)}, nil
}

// parseTime reads -mtime [+-]N (days) or -mmin [+-]N (minutes) into a
// range of mtimes, as GNU find 4.9 decides them from the age a = now -
// mtime (measured, including its off-by-one-second edge for -mtime -N):
//
//	-mmin N: (N-1)*60 < a <= N*60   +N: a > N*60   -N: a < N*60
//	-mtime N: N*D <= a < (N+1)*D    +N: a > (N+1)*D  -N: a < N*D + 1 s
func parseTime(pred, v string, now int64) (Range, error) {
	s, num := sign(v)
	n, err := strconv.ParseUint(num, 10, 32)
	if err != nil || num == "" || num[0] < '0' || num[0] > '9' {
		return Range{}, invalid("invalid argument `%s' to `%s'", v, pred)
	}
	// Ages past 100,000 days (274 years) are beyond what an mtime in ns
	// since 1970 can hold: clamping keeps the arithmetic from overflowing
	// and changes no answer.
	k := int64(min(n, 100_000))
	latest, earliest := int64(math.MaxInt64), int64(math.MinInt64)
	if pred == "-mmin" {
		w := minSecs * second
		switch s {
		case '+':
			return Range{earliest, now - k*w - 1}, nil
		case '-':
			return Range{now - k*w + 1, latest}, nil
		}
		return Range{now - k*w, now - (k-1)*w - 1}, nil
	}
	w := daySecs * second
	switch s {
	case '+':
		return Range{earliest, now - (k+1)*w - 1}, nil
	case '-':
		return Range{now - k*w - second + 1, latest}, nil
	}
	return Range{now - (k+1)*w + 1, now - k*w}, nil
}

// parseID reads -user/-group (a name, or a number) or -uid/-gid (a number).
func parseID(pred, v string, lookup func(string) (uint32, bool)) (uint32, error) {
	if pred == "-user" || pred == "-group" {
		if lookup != nil {
			if id, ok := lookup(v); ok {
				return id, nil
			}
		}
		if id, err := strconv.ParseUint(v, 10, 32); err == nil && v != "" {
			return uint32(id), nil
		}
		what := "user"
		if pred == "-group" {
			what = "group"
		}
		return 0, invalid("`%s' is not the name of a known %s", v, what)
	}
	s, num := sign(v)
	id, err := strconv.ParseUint(num, 10, 32)
	if err != nil || s != 0 {
		return 0, invalid("invalid argument `%s' to `%s'", v, pred)
	}
	return uint32(id), nil
}

// parsePerm reads -perm MODE, -MODE or /MODE, each octal or symbolic.
func parsePerm(v string) (Perm, error) {
	p := Perm{Kind: PermExact}
	m := v
	switch {
	case strings.HasPrefix(m, "-"):
		p.Kind, m = PermAll, m[1:]
	case strings.HasPrefix(m, "/"):
		p.Kind, m = PermAny, m[1:]
	}
	bits, err := parseMode(m)
	if err != nil {
		return Perm{}, invalid("invalid mode `%s'", v)
	}
	p.Bits = bits
	return p, nil
}

// parseMode reads an octal mode or a symbolic one (chmod's syntax applied
// to mode 0, as find does: "u=rw,go=r", "a+x", "g+s").
func parseMode(m string) (uint32, error) {
	if m == "" {
		return 0, fmt.Errorf("empty mode")
	}
	if m[0] >= '0' && m[0] <= '7' {
		n, err := strconv.ParseUint(m, 8, 32)
		if err != nil || n > 0o7777 {
			return 0, fmt.Errorf("bad octal mode")
		}
		return uint32(n), nil
	}
	var mode uint32
	for _, clause := range strings.Split(m, ",") {
		var err error
		if mode, err = applyClause(mode, clause); err != nil {
			return 0, err
		}
	}
	return mode, nil
}

// applyClause applies one symbolic clause, [ugoa]*([-+=]([rwxXst]*|[ugo]))+.
func applyClause(mode uint32, c string) (uint32, error) {
	var who uint32
	i := 0
	for ; i < len(c) && strings.IndexByte("ugoa", c[i]) >= 0; i++ {
		who |= map[byte]uint32{'u': 0o4700, 'g': 0o2070, 'o': 0o1007, 'a': 0o7777}[c[i]]
	}
	if who == 0 {
		who = 0o7777
	}
	if i == len(c) {
		return 0, fmt.Errorf("no operator")
	}
	for i < len(c) {
		op := c[i]
		if op != '+' && op != '-' && op != '=' {
			return 0, fmt.Errorf("bad operator")
		}
		i++
		var perm uint32
		if i < len(c) && strings.IndexByte("ugo", c[i]) >= 0 {
			// Copy another class's bits (of the mode so far).
			var b uint32
			switch c[i] {
			case 'u':
				b = mode >> 6 & 7
			case 'g':
				b = mode >> 3 & 7
			case 'o':
				b = mode & 7
			}
			perm = b<<6 | b<<3 | b
			i++
		} else {
			for ; i < len(c) && strings.IndexByte("rwxXst", c[i]) >= 0; i++ {
				switch c[i] {
				case 'r':
					perm |= 0o444
				case 'w':
					perm |= 0o222
				case 'x':
					perm |= 0o111
				case 'X':
					// Only for directories or files with an x bit: mode 0
					// is neither.
					if mode&0o111 != 0 {
						perm |= 0o111
					}
				case 's':
					perm |= 0o6000
				case 't':
					perm |= 0o1000
				}
			}
		}
		perm &= who
		switch op {
		case '+':
			mode |= perm
		case '-':
			mode &^= perm
		case '=':
			mode = mode&^who | perm
		}
	}
	return mode, nil
}
