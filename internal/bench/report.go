package bench

// The report: results.json (every sample), report.md (one section per
// benchmark with tables shaped like the seed's and the paper's numbers
// beside them) and the plots.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Table is a Markdown table of a report.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
	Notes  []string
}

func (t Table) markdown(w io.Writer) {
	if t.Title != "" {
		fmt.Fprintf(w, "%s\n\n", t.Title)
	}
	fmt.Fprintf(w, "| %s |\n|", strings.Join(t.Header, " | "))
	for i := range t.Header {
		if i > 0 && t.numeric(i) {
			fmt.Fprint(w, "---:|")
		} else {
			fmt.Fprint(w, "---|")
		}
	}
	fmt.Fprintln(w)
	for _, r := range t.Rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	for _, n := range t.Notes {
		fmt.Fprintf(w, "\n%s\n", n)
	}
	fmt.Fprintln(w)
}

// numeric reports whether column i holds numbers (right-aligned).
func (t Table) numeric(i int) bool {
	for _, r := range t.Rows {
		if i < len(r) && r[i] != "" && (r[i][0] < '0' || r[i][0] > '9') {
			return false
		}
	}
	return true
}

func (r *Report) write(dir string) error {
	// Figures first, so the JSON and the Markdown can name them.
	r.Figures = nil
	for _, b := range r.benchmarks() {
		if b.Figures == nil {
			continue
		}
		for _, f := range b.Figures(r.resultsOf(b.Name)) {
			files, err := f.save(dir)
			if err != nil {
				return err
			}
			r.Figures = append(r.Figures, files...)
		}
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), js, 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		return err
	}
	r.Markdown(f)
	return f.Close()
}

// benchmarks returns the suite's entries that ran, with results or not, in
// suite order.
func (r *Report) benchmarks() []Benchmark {
	var out []Benchmark
	for _, b := range All() {
		_, ran := r.Took[b.Name]
		if ran || slices.ContainsFunc(r.Results, func(res Result) bool { return res.Bench == b.Name }) {
			out = append(out, b)
		}
	}
	return out
}

func (r *Report) resultsOf(bench string) []Result {
	var out []Result
	for _, res := range r.Results {
		if res.Bench == bench {
			out = append(out, res)
		}
	}
	return out
}

// Markdown writes the report: the machine and command, then per benchmark
// its tables, the paper's numbers and its plots, then the goals, what was
// skipped and why.
func (r *Report) Markdown(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "Run %s, %s, on %d CPUs (%s), %s RAM, kernel %s, %s; data under %s.\n\n",
		r.Started.Format("2006-01-02 15:04 MST"), r.Duration, m.CPUs, m.Model, m.Memory, m.Kernel, m.Go, m.DataDir)
	fmt.Fprintf(w, "Command: `%s`\n", strings.Join(r.Args, " "))
	if len(r.Targets) > 0 {
		fmt.Fprintf(w, "\nTargets: %s.\n", strings.Join(r.Targets, ", "))
	}
	if len(r.Versions) > 0 {
		var keys []string
		for k := range r.Versions {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		fmt.Fprintf(w, "\nVersions:\n\n")
		for _, k := range keys {
			fmt.Fprintf(w, "- %s: %s\n", k, r.Versions[k])
		}
	}
	for _, b := range r.benchmarks() {
		rs := r.resultsOf(b.Name)
		fmt.Fprintf(w, "\n### %s\n\n%s", b.Name, b.Doc)
		if b.Seed != "" {
			fmt.Fprintf(w, " (%s)", b.Seed)
		}
		fmt.Fprint(w, ".")
		if took, ok := r.Took[b.Name]; ok {
			fmt.Fprintf(w, " Ran %v.", time.Duration(took*float64(time.Second)).Round(time.Second))
		}
		fmt.Fprint(w, "\n\n")
		for _, n := range b.Notes {
			fmt.Fprintf(w, "%s\n\n", n)
		}
		if len(rs) == 0 {
			for _, s := range r.Skipped {
				if why, ok := strings.CutPrefix(s, b.Name+": "); ok {
					fmt.Fprintf(w, "Not measured in this run: %s\n\n", why)
				}
			}
			for _, t := range b.Paper {
				t.markdown(w)
			}
			continue
		}
		tables := []Table{listTable(rs)}
		if b.Tables != nil {
			tables = b.Tables(rs)
		}
		for _, t := range tables {
			t.markdown(w)
		}
		for _, t := range b.Paper {
			t.markdown(w)
		}
		if b.Figures != nil {
			for _, f := range b.Figures(rs) {
				fmt.Fprintf(w, "![%s](%s.svg)\n\n", f.Title, f.Name)
			}
		}
	}
	if len(r.Goals) > 0 {
		fmt.Fprintf(w, "\n### Goals\n\n")
		for _, g := range r.Goals {
			fmt.Fprintf(w, "- %s\n", g)
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintf(w, "\n### Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintf(w, "\n### Skipped\n\n")
		for _, s := range r.Skipped {
			fmt.Fprintf(w, "- %s\n", s)
		}
	}
}

// listTable lists every result as a row: the shape of the core benchmarks.
func listTable(rs []Result) Table {
	t := Table{Header: []string{"case", "target", "median", "min – max", "samples"}}
	for _, res := range rs {
		if len(res.Samples) == 0 {
			t.Rows = append(t.Rows, []string{res.Case, res.Target, res.Note, "", "0"})
			continue
		}
		lo, hi := res.Range()
		t.Rows = append(t.Rows, []string{res.Case, res.Target, num(res.Median()) + " " + res.Unit,
			num(lo) + " – " + num(hi), fmt.Sprint(len(res.Samples))})
	}
	return t
}

// pivot lays results out as a grid: one row per row(result), one column per
// col(result), each cell the median with the min–max. rows and cols fix the
// order; values not listed follow in order of appearance.
func pivot(rs []Result, first string, row, col func(Result) string, rows, cols []string) Table {
	cells := map[[2]string]Result{}
	for _, r := range rs {
		k := [2]string{row(r), col(r)}
		cells[k] = r
		if !slices.Contains(rows, k[0]) {
			rows = append(rows, k[0])
		}
		if !slices.Contains(cols, k[1]) {
			cols = append(cols, k[1])
		}
	}
	var usedCols []string
	for _, c := range cols {
		for _, rw := range rows {
			if _, ok := cells[[2]string{rw, c}]; ok {
				usedCols = append(usedCols, c)
				break
			}
		}
	}
	t := Table{Header: append([]string{first}, usedCols...)}
	for _, rw := range rows {
		line := []string{rw}
		any := false
		for _, c := range usedCols {
			res, ok := cells[[2]string{rw, c}]
			if ok {
				any = true
			}
			line = append(line, cell(res, ok))
		}
		if any {
			t.Rows = append(t.Rows, line)
		}
	}
	return t
}

// cell formats a result as "median (min–max)".
func cell(r Result, ok bool) string {
	switch {
	case !ok:
		return ""
	case len(r.Samples) == 0:
		return r.Note
	}
	lo, hi := r.Range()
	if lo == hi {
		return num(r.Median())
	}
	return fmt.Sprintf("%s (%s–%s)", num(r.Median()), num(lo), num(hi))
}

func num(v float64) string {
	switch {
	case v >= 100:
		return groupThousands(fmt.Sprintf("%.0f", v))
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 0.1:
		return fmt.Sprintf("%.2f", v)
	case v == 0:
		return "0"
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// groupThousands writes 12345 as 12,345.
func groupThousands(s string) string {
	if len(s) <= 3 {
		return s
	}
	var b strings.Builder
	pre := len(s) % 3
	if pre > 0 {
		b.WriteString(s[:pre])
	}
	for i := pre; i < len(s); i += 3 {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s[i : i+3])
	}
	return b.String()
}

// byCase and byTarget are the usual pivot keys.
func byCase(r Result) string   { return r.Case }
func byTarget(r Result) string { return r.Target }

// filter returns the results for which keep is true.
func filter(rs []Result, keep func(Result) bool) []Result {
	var out []Result
	for _, r := range rs {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// Rewrite renders report.md and the plots in dir again from its
// results.json, with this version's tables and figures.
func Rewrite(dir string) (*Report, error) {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "results.json"), err)
	}
	return &r, r.write(dir)
}
