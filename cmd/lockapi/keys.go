package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lockapi/lockapi/internal/auth"
)

const keysUsage = `usage: lockapi keys new --principal NAME [flags]

Prints a fresh API key and the line that configures it. Give the key to the
client; put only the line (it holds the key's SHA-256, not the key) into
LOCKAPI_API_KEYS or the file named by LOCKAPI_API_KEYS_FILE.

Flags:
  --principal NAME   who the key belongs to (recorded on the leases it
                     acquires); required
  --scopes S,...     comma-separated: locks:read, locks:write, admin
                     (default locks:read,locks:write)
  --patterns P,...   comma-separated lock-name patterns the key may use,
                     e.g. ci:*,deploy:* (default *)
  --expires DURATION the key expires this long from now, e.g. 720h; the
                     line gets an expires= field (default: never expires)
  --expires-at TIME  the key expires at this RFC 3339 UTC time, e.g.
                     2027-01-31T00:00:00Z (instead of --expires)

Output: two lines, "key:  " and the key, "line: " and the line.

Exit status: 0 printed; 2 usage error, a scope or pattern that is not
one, or an expiry that is not in the future.
`

// keys handles "lockapi keys new".
func keys(_ context.Context, args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) > 0 && isHelp(args[0]):
		fmt.Fprint(stdout, keysUsage)
		return 0
	case len(args) == 0 || args[0] != "new":
		reportUsage(stderr, "keys", errors.New("want the subcommand new: lockapi keys new --principal NAME"))
		return exitUsage
	}
	f := newFlags("keys new")
	var principal, scopes, patterns string
	f.bind("principal", stringValue(&principal, ""))
	f.bind("scopes", stringValue(&scopes, "locks:read,locks:write"))
	f.bind("patterns", stringValue(&patterns, "*"))
	var expiresIn time.Duration
	var expiresAt time.Time
	f.bind("expires", durationValue(&expiresIn, 0, positive))
	f.bind("expires-at", expiresAtValue(&expiresAt))
	err := f.parse(args[1:])
	now := time.Now()
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, keysUsage)
		return 0
	case err == nil && f.fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", f.fs.Arg(0))
	case err == nil && principal == "":
		err = errors.New("missing --principal NAME, who the key belongs to")
	case err == nil && expiresIn > 0 && !expiresAt.IsZero():
		err = errors.New("--expires and --expires-at both say when the key expires: give one")
	case err == nil && expiresIn > 0:
		expiresAt = now.Add(expiresIn)
	case err == nil && !expiresAt.IsZero() && !expiresAt.After(now):
		err = fmt.Errorf("--expires-at %s is not in the future: the key would authenticate nobody", auth.FormatExpires(expiresAt))
	}
	if err != nil {
		reportUsage(stderr, "keys new", err)
		return exitUsage
	}
	var ss []auth.Scope
	for _, s := range strings.Split(scopes, ",") {
		ss = append(ss, auth.Scope(strings.TrimSpace(s)))
	}
	key, line, err := auth.NewExpiringKey(principal, ss, strings.Split(patterns, ","), expiresAt)
	if err != nil {
		fmt.Fprintf(stderr, "lockapi keys new: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stdout, "key:  %s\nline: %s\n", key, line)
	return 0
}

// expiresAtValue is a key's expiry as the key line writes it (an RFC 3339
// UTC time), read by the key line's own rule (auth.ParseExpires).
func expiresAtValue(p *time.Time) value {
	return value{arg: "TIME", set: func(s string) error {
		t, err := auth.ParseExpires(s)
		if err != nil {
			return wantf("an RFC 3339 UTC time such as 2027-01-31T00:00:00Z")
		}
		*p = t
		return nil
	}}
}
