// Command weft is the single weft binary: servers, client tools and
// benchmarks, as subcommands. Everything lives in internal/cli; this file
// only connects it to the process: signals, the printed error and the exit
// code.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/weftfs/weft/internal/cli"
)

func main() {
	// The first SIGINT or SIGTERM cancels the context: servers shut down
	// gracefully and client commands stop. stop restores the default
	// handling as soon as weft is on its way out, so a second signal kills.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := cli.NewRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "weft:", err)
	}
	os.Exit(cli.ExitCode(err))
}
