package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/weftfs/weft/internal/bench"
)

func newBenchCommand(a *app) *cobra.Command {
	var opts bench.Options
	cmd := &cobra.Command{
		Use:   "bench [NAME...|all]",
		Short: "Run weft's benchmarks side by side with their baselines",
		Long:  "Run weft's benchmarks and write results.json and report.md to --out.\n\nBenchmarks:\n" + benchList(),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Log = a.cliLogger(cmd.ErrOrStderr())
			opts.Args = os.Args
			rep, err := bench.Run(cmd.Context(), args, opts)
			if err != nil {
				return err
			}
			rep.Markdown(cmd.OutOrStdout())
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Out, "out", "bench-out", "directory for results.json and report.md")
	f.IntVar(&opts.Repeats, "repeats", 3, "samples per measurement")
	f.BoolVar(&opts.Quick, "quick", false, "small sizes (CI)")
	return cmd
}

func benchList() string {
	s := ""
	for _, b := range bench.All() {
		s += fmt.Sprintf("  %-8s %s\n", b.Name, b.Doc)
	}
	return s
}
