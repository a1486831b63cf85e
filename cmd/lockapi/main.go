// Command lockapi is the lock service and its command-line tools.
//
//	lockapi [serve] [flags]   run the server (the default)
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
	"runtime/debug"
	"syscall"
)

func main() {
	// lockapi's heap is small and its garbage short-lived: collecting less
	// often buys throughput for a few MB. GOGC, when set, still decides.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a subcommand and returns the process exit status. It takes
// its context, arguments and output so that tests can run the whole program
// in-process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
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
	case "keys":
		return keys(ctx, args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "lockapi: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
}

const usage = `usage: lockapi <command> [flags]

commands:
  serve    run the lock server (the default); lockapi serve -h lists its flags
  run      run a command while holding a lock: lockapi run [flags] NAME -- COMMAND...
           (exit 75: lock still held after --wait, 70: lease lost, 69: server
           unavailable, 2: usage; lockapi run -h says more)
  status   print a lock's state: lockapi status [--json] NAME
  events   print lock events as they happen: lockapi events [--prefix P | --lock NAME]
           [--types T,...] [--after ID] [--json]
  keys     create an API key: lockapi keys new --principal NAME [--scopes …] [--patterns …]
  help     print this text
`
