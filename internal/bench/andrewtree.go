package bench

// The Andrew benchmark's input: a deterministic tree with the shape of the
// Linux kernel source the Snapdragon paper used (690 directories, 10,528
// files, ~127 MB, 97% of files under 64 KB, all but one under 900 KB, the
// largest ~2 MB), including C sources and a Makefile whose build writes
// ~1,362 files (an object and a dependency file per source). Generated once
// into the cache.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// treeShape is the size of a generated tree.
type treeShape struct {
	Dirs, Files, Sources int
	Bytes                int64
	Largest              int64
}

var (
	andrewFull  = treeShape{Dirs: 690, Files: 10528, Sources: 681, Bytes: 127 << 20, Largest: 2 << 20}
	andrewQuick = treeShape{Dirs: 35, Files: 526, Sources: 34, Bytes: 6350 << 10, Largest: 2 << 20}
)

// andrewTree is a generated tree: where it is, its directories (relative,
// parents first) and files (relative), as the phases walk them.
type andrewTree struct {
	Root  string
	Dirs  []string
	Files []string
	Bytes int64
}

// treeVersion changes whenever generation changes, so a cached tree from an
// older suite is not reused.
const treeVersion = "v2"

// loadAndrewTree returns the tree of shape s under cache, generating it the
// first time.
func loadAndrewTree(cache string, s treeShape) (*andrewTree, error) {
	root := filepath.Join(cache, fmt.Sprintf("andrew-%s-%d-%d", treeVersion, s.Dirs, s.Files))
	plan := planTree(s)
	t := &andrewTree{Root: root, Dirs: plan.dirs}
	for _, f := range plan.files {
		t.Files = append(t.Files, f.path)
		t.Bytes += f.size
	}
	if _, err := os.Stat(filepath.Join(root, ".complete")); err == nil {
		return t, nil
	}
	// Trees of older generators are of no further use.
	if old, err := filepath.Glob(filepath.Join(cache, "andrew-*")); err == nil {
		for _, o := range old {
			if !strings.HasPrefix(filepath.Base(o), "andrew-"+treeVersion+"-") {
				os.RemoveAll(o)
			}
		}
	}
	tmp := root + ".tmp"
	os.RemoveAll(tmp)
	if err := plan.write(tmp); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return nil, err
	}
	os.RemoveAll(root)
	if err := os.Rename(tmp, root); err != nil {
		return nil, err
	}
	return t, nil
}

type plannedFile struct {
	path   string
	size   int64 // for text files; sources are as long as their code
	source int   // > 0: the index+1 of a C source
}

type treePlan struct {
	dirs    []string
	files   []plannedFile
	sources []string // .c paths
}

// planTree lays out directories and files with a fixed seed.
func planTree(s treeShape) treePlan {
	rng := rand.New(rand.NewPCG(2003, uint64(s.Files)))
	var p treePlan
	// Directories: a few top-level ones, then each new directory under a
	// random earlier one, biased to shallow parents, as a source tree is.
	p.dirs = []string{"include"}
	for len(p.dirs) < s.Dirs {
		var parent string
		if len(p.dirs) > 12 {
			parent = p.dirs[rng.IntN(len(p.dirs)/2+1)]
			if strings.Count(parent, "/") > 3 {
				parent = ""
			}
		}
		p.dirs = append(p.dirs, filepath.Join(parent, fmt.Sprintf("d%03d", len(p.dirs))))
	}
	// Files: the largest first, then 3% large ones, then small ones; C
	// sources among the small ones, one header per 32 sources in include/.
	headers := max(1, s.Sources/32)
	other := s.Files - s.Sources - headers - 1 // - 1: the Makefile
	large := s.Files * 3 / 100
	sizes := make([]int64, other)
	sizes[0] = s.Largest - 97<<10 // "roughly 2 MB"
	var fixed int64 = sizes[0]
	for i := 1; i <= large && i < other; i++ {
		hi := 512.0 * 1024
		if i <= 5 {
			hi = 900 * 1024
		}
		sizes[i] = int64(64*1024*math.Exp(rng.Float64()*math.Log(hi/(64*1024)))) - 1
		fixed += sizes[i]
	}
	srcBytes := int64(s.Sources) * 6100 // about what a generated source is
	mean := float64(s.Bytes-fixed-srcBytes) / float64(max(1, other-large-1))
	for i := large + 1; i < other; i++ {
		sizes[i] = min(int64(rng.ExpFloat64()*mean), 64<<10-1)
	}
	dirFor := func() string { return p.dirs[1+rng.IntN(len(p.dirs)-1)] }
	for i, sz := range sizes {
		p.files = append(p.files, plannedFile{path: filepath.Join(dirFor(), fmt.Sprintf("f%05d.txt", i)), size: sz})
	}
	for i := range headers {
		p.files = append(p.files, plannedFile{path: filepath.Join("include", fmt.Sprintf("h%02d.h", i)), source: -(i + 1)})
	}
	for i := range s.Sources {
		path := filepath.Join(dirFor(), fmt.Sprintf("s%04d.c", i))
		p.sources = append(p.sources, path)
		p.files = append(p.files, plannedFile{path: path, source: i + 1})
	}
	p.files = append(p.files, plannedFile{path: "Makefile"})
	return p
}

func (p treePlan) write(root string) error {
	for _, d := range p.dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	headers := 0
	for _, f := range p.files {
		if f.source < 0 {
			headers++
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range p.files {
		var data []byte
		switch {
		case f.path == "Makefile":
			data = makefile(p.sources)
		case f.source < 0:
			data = header(-f.source - 1)
		case f.source > 0:
			data = cSource(f.source-1, headers)
		default:
			data = text(rng, f.size)
		}
		if err := os.WriteFile(filepath.Join(root, f.path), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// text is size bytes of lines of pseudo-words.
func text(rng *rand.Rand, size int64) []byte {
	const letters = "etaoinshrdlucmfwypvbgkjqxz"
	b := make([]byte, size)
	col := 0
	for i := range b {
		switch {
		case col >= 72:
			b[i], col = '\n', 0
		case rng.IntN(6) == 0:
			b[i], col = ' ', col+1
		default:
			b[i], col = letters[rng.IntN(len(letters))%(1+rng.IntN(len(letters)))], col+1
		}
	}
	return b
}

func header(i int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "#ifndef WEFT_H%02d\n#define WEFT_H%02d\n\n", i, i)
	fmt.Fprintf(&b, "struct rec%02d { long key; long val[8]; struct rec%02d *next; };\n", i, i)
	for j := range 8 {
		fmt.Fprintf(&b, "long h%02d_fn%d(struct rec%02d *r, long x);\n", i, j, i)
	}
	fmt.Fprintf(&b, "#define H%02d_MIX(a, b) (((a) * 31) ^ ((b) >> 3))\n\n#endif\n", i)
	return []byte(b.String())
}

// cSource is a compilable C file of about 6 KB whose object file with debug
// information is about 18 KB, so the build writes ~13 MB in all.
func cSource(i, headers int) []byte {
	var b strings.Builder
	h := i % headers
	fmt.Fprintf(&b, "#include <stddef.h>\n#include \"h%02d.h\"\n\n", h)
	fmt.Fprintf(&b, "static long table_%d[64] = {", i)
	for j := range 64 {
		fmt.Fprintf(&b, "%d, ", (i*131+j*17)%1000)
	}
	fmt.Fprint(&b, "};\n\n")
	for j := range 24 {
		fmt.Fprintf(&b, "long h%02d_fn%d_%d(struct rec%02d *r, long x)\n{\n", h, j, i, h)
		fmt.Fprintf(&b, "\tlong acc = x;\n\tfor (; r != NULL; r = r->next) {\n")
		fmt.Fprintf(&b, "\t\tfor (int k = 0; k < 8; k++)\n\t\t\tacc = H%02d_MIX(acc, r->val[k] + table_%d[(k + %d) & 63]);\n", h, i, j)
		fmt.Fprintf(&b, "\t\tif (acc %% %d == 0)\n\t\t\tacc += r->key;\n\t}\n\treturn acc;\n}\n\n", j+3)
	}
	return []byte(b.String())
}

func makefile(sources []string) []byte {
	var b strings.Builder
	b.WriteString("# Generated by weft bench andrew: every source becomes an object and a\n# dependency file (make dep and make in one pass).\nCC ?= gcc\nCFLAGS = -O0 -g -Iinclude\nOBJS = \\\n")
	for _, s := range sources {
		fmt.Fprintf(&b, "\t%s \\\n", strings.TrimSuffix(s, ".c")+".o")
	}
	b.WriteString("\nall: $(OBJS)\n\n%.o: %.c\n\t$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<\n\n-include $(OBJS:.o=.d)\n")
	return []byte(b.String())
}
