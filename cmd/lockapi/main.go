// Command lockapi is the lock service and its command-line tools.
//
//	lockapi [serve] [flags]   run the server (the default)
//	lockapi -h                the commands, and where to read on
//	lockapi -v, --version     what lockapi version prints
//
// Every serve flag can also be set with a LOCKAPI_* environment variable;
// `lockapi serve -h` lists them.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a subcommand and returns the process exit status. It takes
// its context, arguments and output so that tests can run the whole program
// in-process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// Plain lockapi, or lockapi with flags only, is lockapi serve: the
	// README's first command (go run ./cmd/lockapi) and the Docker image's
	// ENTRYPOINT, which names no command, start the server that way. Asking
	// for help is the exception: -h and --help alone print the overview,
	// not the server's flags.
	if len(args) == 1 && isHelp(args[0]) {
		fmt.Fprint(stdout, overview)
		return 0
	}
	if len(args) == 1 && isVersion(args[0]) {
		return versionCmd(nil, stdout, stderr)
	}
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, stdout, stderr)
	case "run":
		return runCmd(ctx, args, stdout, stderr)
	case "status":
		return statusCmd(ctx, args, stdout, stderr)
	case "events":
		return eventsCmd(ctx, args, stdout, stderr)
	case "history":
		return historyCmd(ctx, args, stdout, stderr)
	case "top":
		return topCmd(ctx, args, stdout, stderr)
	case "keys":
		return keys(ctx, args, stdout, stderr)
	case "version":
		return versionCmd(args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, overview)
		return 0
	default:
		fmt.Fprintf(stderr, "lockapi: unknown command %q (lockapi -h lists the commands)\n", cmd)
		return exitUsage
	}
}

// isVersion reports whether arg, alone, asks for the version.
func isVersion(arg string) bool {
	return arg == "-v" || arg == "--version" || arg == "-version"
}
