package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/weftfs/weft/internal/bench"
)

func newBenchCommand(a *app) *cobra.Command {
	var opts bench.Options
	var rewrite bool
	cmd := &cobra.Command{
		Use:   "bench [NAME...|all|fuse]",
		Short: "Run weft's benchmarks side by side with other file systems",
		Long: "Run weft's benchmarks and write results.json, report.md and plots (SVG, PNG) to --out.\n" +
			"File-system benchmarks run on each of --targets: mount points the suite prepares\n" +
			"and tears down itself (weft = weft up --mount, local = a directory on the local\n" +
			"disk, tmpfs, sshfs = a private sshd on 127.0.0.1, juicefs = JuiceFS with SQLite and\n" +
			"with Redis metadata, loopback = go-fuse's loopback over tmpfs). A target that cannot\n" +
			"be set up is reported as skipped with the reason. Mounting needs root.\n\n" +
			"Benchmarks (all, or no name, runs those of no group; fuse runs the FUSE\n" +
			"issue's table against peers, at sizes that take about an hour; ops the operational\n" +
			"measurements such as repair, minutes each). --base-weft adds a \"(base)\" column run\n" +
			"with an older build beside each weft FUSE target (and putget), for new/base ratios:\n" + benchList(),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The suite re-runs this binary as its worker processes.
			if ran, err := bench.RunWorker(cmd.InOrStdin(), cmd.OutOrStdout()); ran {
				return err
			}
			if rewrite {
				rep, err := bench.Rewrite(opts.Out)
				if err != nil {
					return err
				}
				rep.Markdown(cmd.OutOrStdout())
				return nil
			}
			opts.Log = a.cliLogger(cmd.ErrOrStderr())
			opts.Args = os.Args
			if f, ok := cmd.ErrOrStderr().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				opts.Progress = f
			}
			rep, err := bench.Run(cmd.Context(), args, opts)
			if err != nil {
				return err
			}
			rep.Markdown(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Out, "out", "bench-out", "directory for results.json, report.md and the plots")
	f.IntVar(&opts.Repeats, "repeats", 3, "samples per measurement")
	f.BoolVar(&opts.Quick, "quick", false, "small sizes (CI)")
	f.IntVar(&opts.MdtestFiles, "mdtest-files", 0, "files per mdtest run (default 20000, 2000 with --quick)")
	f.IntVar(&opts.UntarEntries, "untar-entries", 0, "entries of the kernel tree fuseuntar unpacks (default the whole tree, 300 with --quick)")
	f.IntSliceVar(&opts.MdtestServers, "mdtest-servers", nil, "meta server counts mdtest runs (default 1,2,4,8)")
	f.IntSliceVar(&opts.FindFiles, "find-files", nil, "tree sizes the find benchmark measures at, the largest its full tree (default 10000,100000)")
	f.IntSliceVar(&opts.FindServers, "find-servers", nil, "meta server counts of the find benchmark's server sweep (default 1,2,4,8)")
	f.StringSliceVar(&opts.Targets, "targets", []string{"weft", "local"},
		"file systems to measure: "+strings.Join(bench.TargetNames, ", "))
	f.StringVar(&opts.BaseWeft, "base-weft", "",
		"a weft binary built from an older commit: adds a \"(base)\" column beside each weft FUSE target, and new/base ratios")
	f.StringVar(&opts.Cache, "cache", "", "directory for what the suite installs and generates once (default ~/.cache/weft-bench)")
	f.BoolVar(&rewrite, "rewrite", false, "measure nothing: render report.md and the plots in --out again from its results.json")
	f.BoolVar(&opts.InstallDeps, "install-deps", os.Geteuid() == 0,
		"install missing Debian packages (openssh-server, sshfs, redis-server, postmark, linux-source) with apt-get")
	return cmd
}

func benchList() string {
	s := ""
	for _, b := range bench.All() {
		group := ""
		if b.Group != "" {
			group = "(" + b.Group + ") "
		}
		s += fmt.Sprintf("  %-12s %s%s\n", b.Name, group, firstSentence(b.Doc))
	}
	return s
}

// firstSentence shortens a benchmark's description for the help text.
func firstSentence(s string) string {
	if i := strings.IndexAny(s, ":;"); i > 0 && i < 90 {
		return s[:i]
	}
	if len(s) > 90 {
		return s[:87] + "..."
	}
	return s
}
