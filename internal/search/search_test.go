package search

import (
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/weftfs/weft/internal/core"
)

// TestGlobMatchesPathMatch: on names without '/', Glob agrees with Go's
// path.Match wherever path.Match accepts the pattern (both are fnmatch
// without flags there), except for classes opened by "[!", a negation in
// fnmatch and a literal '!' in Go; character classes are tested below.
func TestGlobMatchesPathMatch(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pat := rapid.StringOfN(rapid.SampledFrom([]rune("ab.*?[]!^-\\")), 0, 8, -1).Draw(t, "pattern")
		name := rapid.StringOfN(rapid.SampledFrom([]rune("ab.-]![^\\")), 0, 8, -1).Draw(t, "name")
		want, err := path.Match(pat, name)
		if err != nil || strings.Contains(pat, "[!") {
			return // "[!" negates a class in fnmatch (find's), not in Go
		}
		if got := (Glob{Pattern: pat}).Match(name); got != want {
			t.Fatalf("Glob(%q).Match(%q) = %v, path.Match says %v", pat, name, got, want)
		}
	})
}

func TestGlobCases(t *testing.T) {
	for _, c := range []struct {
		pat, name  string
		fold, want bool
	}{
		{"*", ".hidden", false, true},
		{"[[:digit:]]x", "7x", false, true},
		{"[[:alpha:]]*", "9a", false, false},
		{"[abc", "[abc", false, true}, // no closing ']': '[' is an ordinary byte
		{"a\\*", "a*", false, true},
		{"a\\*", "ab", false, false},
		{"DATA*.bin", "data7.BIN", true, true},
		{"[A-C]x", "bx", true, true},
		{"*/b/*", "/t/a/b/c", false, true},
		{"[]]", "]", false, true},
		{"[!]]", "a", false, true},
	} {
		if got := (Glob{Pattern: c.pat, Fold: c.fold}).Match(c.name); got != c.want {
			t.Errorf("Glob(%q, fold %v).Match(%q) = %v, want %v", c.pat, c.fold, c.name, got, c.want)
		}
	}
}

// TestSizeRounding: -size's range holds exactly the sizes whose count of
// units, rounded up, compares with N as GNU find compares it.
func TestSizeRounding(t *testing.T) {
	units := map[string]int64{"": 512, "c": 1, "w": 2, "b": 512, "k": 1024, "M": 1 << 20, "G": 1 << 30}
	rapid.Check(t, func(t *rapid.T) {
		suffix := rapid.SampledFrom([]string{"", "c", "w", "b", "k", "M", "G"}).Draw(t, "unit")
		sign := rapid.SampledFrom([]string{"", "+", "-"}).Draw(t, "sign")
		n := rapid.Int64Range(0, 40).Draw(t, "n")
		u := units[suffix]
		size := rapid.OneOf(rapid.Int64Range(0, 3*u+3), rapid.Int64Range(0, 50*u)).Draw(t, "size")
		r, err := parseSize(sign + strconv.FormatInt(n, 10) + suffix)
		if err != nil {
			t.Fatal(err)
		}
		blocks := (size + u - 1) / u
		want := map[string]bool{"": blocks == n, "+": blocks > n, "-": blocks < n}[sign]
		if got := r.has(size); got != want {
			t.Fatalf("-size %s%d%s on %d bytes: %v, want %v (range %v)", sign, n, suffix, size, got, want, r)
		}
	})
}

// TestTimeWindows: -mtime and -mmin ranges against the ages GNU find 4.9
// was measured to accept (docs/cli.md).
func TestTimeWindows(t *testing.T) {
	const now = int64(1_800_000_000) * second
	rapid.Check(t, func(t *rapid.T) {
		pred := rapid.SampledFrom([]string{"-mtime", "-mmin"}).Draw(t, "pred")
		sign := rapid.SampledFrom([]string{"", "+", "-"}).Draw(t, "sign")
		n := rapid.Int64Range(0, 5).Draw(t, "n")
		w := int64(daySecs)
		if pred == "-mmin" {
			w = minSecs
		}
		age := rapid.Int64Range(-2*w*second, 8*w*second).Draw(t, "age")
		r, err := parseTime(pred, sign+strconv.FormatInt(n, 10), now)
		if err != nil {
			t.Fatal(err)
		}
		W := w * second
		var want bool
		switch {
		case pred == "-mmin" && sign == "":
			want = (n-1)*W < age && age <= n*W
		case pred == "-mmin" && sign == "+":
			want = age > n*W
		case pred == "-mmin":
			want = age < n*W
		case sign == "":
			want = n*W <= age && age < (n+1)*W
		case sign == "+":
			want = age > (n+1)*W
		default:
			want = age < n*W+second
		}
		if got := r.has(now - age); got != want {
			t.Fatalf("%s %s%d at age %d ns: %v, want %v", pred, sign, n, age, got, want)
		}
	})
}

func TestPermForms(t *testing.T) {
	for _, c := range []struct {
		arg  string
		mode uint32
		want bool
	}{
		{"644", 0o644, true},
		{"644", 0o4644, false},
		{"-4000", 0o4755, true},
		{"-4000", 0o755, false},
		{"/0077", 0o600, false},
		{"/0077", 0o604, true},
		{"/000", 0o000, true},
		{"-u=rw,g=r", 0o640, true},
		{"-u=rw,g=r", 0o600, false},
		{"/u+s,g+s", 0o2711, true},
		{"g=x,u=rwx", 0o710, true},
		{"a+x", 0o111, true},
		{"u=rwx,go=u", 0o777, true},
		{"-o+t", 0o1777, true},
	} {
		p, err := parsePerm(c.arg)
		if err != nil {
			t.Fatalf("-perm %s: %v", c.arg, err)
		}
		if got := p.match(c.mode); got != c.want {
			t.Errorf("-perm %s on %o: %v, want %v (bits %o)", c.arg, c.mode, got, c.want, p.Bits)
		}
	}
	for _, bad := range []string{"", "8", "-", "/", "u", "u*w", "99999"} {
		if _, err := parsePerm(bad); err == nil {
			t.Errorf("-perm %q accepted", bad)
		}
	}
}

// FuzzParse: no argument list crashes the parser; an accepted one survives
// the trip over the wire unchanged, and its ranges are well formed.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"/t -name *.txt -type f,d -size +3k",
		"/ -mtime -2 -mmin +30 -perm /u+s -user 0 -group 0",
		"/a -xattr user.x -iname A* -path */b/* -print0",
		"/ -size -99999999999999999999G -perm 7777 -ls --json",
		"-o", "/ -type", "/ -perm u=", "/ -mtime +4294967295",
	} {
		f.Add(s)
	}
	env := Env{NowNs: 1_800_000_000 * second, MtimeOf: func(string) (int64, error) { return 5, nil }}
	f.Fuzz(func(t *testing.T, line string) {
		e, err := Parse(strings.Fields(line), env)
		if err != nil {
			return
		}
		q, err := FromProto("fuzz", e.Query.ToProto())
		if err != nil {
			t.Fatalf("%q: round trip refused: %v", line, err)
		}
		q.Paths = e.Query.Paths
		if !equalQuery(q, &e.Query) {
			t.Fatalf("%q: round trip changed the query: %+v -> %+v", line, e.Query, *q)
		}
		for _, r := range append(slices.Clone(q.Sizes), q.Mtimes...) {
			if r.Lo > r.Hi && !(r.Lo == 1 && r.Hi == 0) && r.Hi != math.MaxInt64 {
				t.Fatalf("%q: range %v", line, r)
			}
		}
		q.MatchAttrs(Attrs{Mode: core.ModeFile | 0o644, Size: 10}, false)
	})
}

func equalQuery(a, b *Query) bool {
	return slices.Equal(a.Names, b.Names) && slices.Equal(a.Paths, b.Paths) && slices.Equal(a.Types, b.Types) &&
		slices.Equal(a.Sizes, b.Sizes) && slices.Equal(a.Mtimes, b.Mtimes) && slices.Equal(a.Uids, b.Uids) &&
		slices.Equal(a.Gids, b.Gids) && slices.Equal(a.Perms, b.Perms) && slices.Equal(a.Xattrs, b.Xattrs)
}

// TestGlobLiteralEnds: every name a pattern matches starts with its
// LiteralStart and ends with its LiteralEnd (the meta server reads only
// the index keys of such names), and a pattern with a literal run at an
// end has it there.
func TestGlobLiteralEnds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pat := rapid.StringOfN(rapid.SampledFrom([]rune("ab*?[]!^-\\:")), 0, 9, -1).Draw(t, "pattern")
		name := rapid.StringOfN(rapid.SampledFrom([]rune("ab]![^-\\:")), 0, 9, -1).Draw(t, "name")
		g := Glob{Pattern: pat}
		if !g.Match(name) {
			return
		}
		if s := g.LiteralStart(); !strings.HasPrefix(name, s) {
			t.Fatalf("%q matches %q but does not start with its literal start %q", name, pat, s)
		}
		if e := g.LiteralEnd(); !strings.HasSuffix(name, e) {
			t.Fatalf("%q matches %q but does not end with its literal end %q", name, pat, e)
		}
		if g.MatchBytes([]byte(name)) != true {
			t.Fatalf("MatchBytes(%q) disagrees with Match", name)
		}
	})
	for _, c := range []struct{ pat, start, end string }{
		{"f???0000", "f", "0000"},
		{"*.c", "", ".c"},
		{"ab\\*cd", "ab", "cd"},
		{"x[ab]c]", "x", ""},
		{"plain", "plain", "plain"},
	} {
		g := Glob{Pattern: c.pat}
		if g.LiteralStart() != c.start || g.LiteralEnd() != c.end {
			t.Errorf("%q: literal start %q end %q, want %q %q", c.pat, g.LiteralStart(), g.LiteralEnd(), c.start, c.end)
		}
	}
	if (Glob{Pattern: "ab*", Fold: true}).LiteralStart() != "" {
		t.Error("a folded pattern has no literal start")
	}
}
