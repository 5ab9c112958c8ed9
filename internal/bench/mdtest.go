package bench

import "context"

// mdtest: seed 002's mdtest (create, stat and remove of zero-length files in
// ONE directory by many clients, against the number of meta servers) belongs
// to the GIGA+ issue, which brings several meta servers and directory
// splitting; until then the suite lists it.
func mdtestBenchmark() Benchmark {
	return Benchmark{
		Name: "mdtest",
		Seed: "seed 002, GIGA+ on PanFS, mdtest",
		Doc:  "mdtest in one shared directory against the number of meta servers",
		Run: func(ctx context.Context, env *Env) ([]Result, error) {
			return []Result{notYet("mdtest", "create / stat / remove, one directory", "weft", "GIGA+ issue")}, nil
		},
	}
}
