package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/lockapi/lockapi/internal/auth"
)

const keysUsage = `usage: lockapi keys new --principal NAME [--scopes locks:read,locks:write] [--patterns '*']

Prints a fresh API key and the line that configures it. Give the key to the
client; put only the line (it holds the key's SHA-256, not the key) into
LOCKAPI_API_KEYS or the file named by LOCKAPI_API_KEYS_FILE.
`

// keys handles "lockapi keys new".
func keys(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "new" {
		fmt.Fprint(stderr, keysUsage)
		return 2
	}
	fs := flag.NewFlagSet("keys new", flag.ContinueOnError)
	fs.SetOutput(stderr)
	principal := fs.String("principal", "", "who the key belongs to (recorded on the leases it acquires)")
	scopes := fs.String("scopes", "locks:read,locks:write", "comma-separated: locks:read, locks:write, admin")
	patterns := fs.String("patterns", "*", "comma-separated lock-name patterns the key may use, e.g. ci:*,deploy:*")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *principal == "" || fs.NArg() > 0 {
		fmt.Fprint(stderr, keysUsage)
		return 2
	}
	var ss []auth.Scope
	for _, s := range strings.Split(*scopes, ",") {
		ss = append(ss, auth.Scope(strings.TrimSpace(s)))
	}
	key, line, err := auth.NewKey(*principal, ss, strings.Split(*patterns, ","))
	if err != nil {
		fmt.Fprintf(stderr, "lockapi keys new: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "key:  %s\nline: %s\n", key, line)
	return 0
}
