package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/event"
)

const historyUsage = `usage: lockapi history [flags] NAME

Prints the recent leases of the lock NAME, newest first, its current
holders first: owner, principal, fencing token, when it was granted and
how long its request waited, how long it was held and how it ended
(released, expired, force_released, session_ended). The server keeps what
it read of the last hour of lock events; "-" stands for what it did not see.

Flags:
  --server URL   lockapi server (default $LOCKAPI_URL, else http://localhost:8080)
  --limit N      at most N leases (default: the server's, 100)
  --json         print the history as one line of JSON, in the form of the
                 server's answer (LockHistory in openapi.yaml)

$LOCKAPI_API_KEY, when set, is sent as the bearer token.

Exit status: 0 on success; 2 usage error or a bad NAME; 69 the server was
unavailable, failed or records no events; 77 the server refused the API key.
`

// historyCmd implements `lockapi history`.
func historyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("history", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below
	fs.Usage = func() {}
	server := fs.String("server", defaultServer(stderr), "")
	limit := fs.Int("limit", 0, "")
	asJSON := fs.Bool("json", false, "")
	names, code := parseWithNames(fs, args, "history", historyUsage, stdout, stderr)
	if names == nil {
		return code
	}
	if len(names) != 1 || *limit < 0 {
		err := fmt.Errorf("want one lock NAME, got %d", len(names))
		if *limit < 0 {
			err = errors.New("--limit must be positive")
		}
		reportUsage(stderr, "history", err)
		return exitUsage
	}
	cl, err := newClient(*server)
	if err != nil {
		fmt.Fprintf(stderr, "lockapi history: %s\n", errText(err))
		return exitUsage
	}
	leases, err := cl.History(ctx, names[0], *limit)
	if err != nil {
		fmt.Fprintf(stderr, "lockapi history: %s\n", errText(err))
		return exitCode(err)
	}
	if *asJSON {
		line, _ := json.Marshal(struct {
			Lock   string             `json:"lock"`
			Leases []client.PastLease `json:"leases"`
		}{names[0], leases})
		fmt.Fprintf(stdout, "%s\n", line)
		return 0
	}
	printHistory(stdout, leases)
	return 0
}

// parseWithNames parses flags that may come before or after the names, and
// returns the names; nil names: stop with code (help, or a usage error).
func parseWithNames(fs *flag.FlagSet, args []string, cmd, usage string, stdout, stderr io.Writer) ([]string, int) {
	names := []string{}
	for rest := args; ; {
		if err := fs.Parse(rest); errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return nil, 0
		} else if err != nil {
			reportUsage(stderr, cmd, err)
			return nil, exitUsage
		}
		if fs.NArg() == 0 {
			return names, 0
		}
		names = append(names, fs.Arg(0))
		rest = fs.Args()[1:]
	}
}

// printHistory writes leases as a table.
func printHistory(w io.Writer, leases []client.PastLease) {
	if len(leases) == 0 {
		fmt.Fprintln(w, "no leases in the last hour")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	defer tw.Flush()
	fmt.Fprintln(tw, "TOKEN\tOWNER\tPRINCIPAL\tMODE\tACQUIRED\tWAITED\tHELD\tENDED")
	for _, l := range leases {
		mode := "exclusive"
		if l.Shared {
			mode = "shared"
		}
		acquired, ended := "-", "holding"
		if !l.AcquiredAt.IsZero() {
			acquired = event.FormatTime(l.AcquiredAt)
		}
		if l.EndedBy != "" {
			ended = string(l.EndedBy)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Token, l.Owner, orDash(l.Principal), mode, acquired,
			durationOrDash(l.Waited, l.WaitedKnown), durationOrDash(l.Held, l.HeldKnown), ended)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func durationOrDash(d time.Duration, known bool) string {
	if !known {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

const topUsage = `usage: lockapi top [flags]

Shows the hottest locks of the last window, from the server's statistics
(GET /v1/stats/locks): grants, expiries, force releases, held and waited
p50/p99 and the largest queue, and the principals whose leases expired
most. It refreshes every 2 s until interrupted, like top(1).

Flags:
  --server URL     lockapi server (default $LOCKAPI_URL, else http://localhost:8080)
  --window W       how far back to count, 1m to 1h (default 15m)
  --sort S         grants, waited or expiries (default grants)
  --limit N        at most N locks (default 20)
  --interval D     time between refreshes (default 2s)
  -n N             stop after N refreshes (0, the default: until interrupted)

$LOCKAPI_API_KEY, when set, is sent as the bearer token; only the locks the
key may read are counted.

Exit status: 0 when interrupted or after -n refreshes; 2 usage error; 69
the server was unavailable, failed or records no events; 77 the server
refused the API key.
`

// clearScreen moves the cursor home and clears a terminal, between frames.
const clearScreen = "\x1b[H\x1b[2J"

// topCmd implements `lockapi top`.
func topCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below
	fs.Usage = func() {}
	server := fs.String("server", defaultServer(stderr), "")
	var opts client.LockStatsOptions
	fs.DurationVar(&opts.Window, "window", 15*time.Minute, "")
	sort := fs.String("sort", "grants", "")
	fs.IntVar(&opts.Limit, "limit", 20, "")
	interval := fs.Duration("interval", 2*time.Second, "")
	frames := fs.Int("n", 0, "")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, topUsage)
		return 0
	} else if err != nil {
		reportUsage(stderr, "top", err)
		return exitUsage
	}
	opts.Sort = client.StatsSort(*sort)
	if err := topArgs(fs, opts, *interval, *frames); err != nil {
		reportUsage(stderr, "top", err)
		return exitUsage
	}
	cl, err := newClient(*server)
	if err != nil {
		fmt.Fprintf(stderr, "lockapi top: %s\n", errText(err))
		return exitUsage
	}
	for i := 0; *frames == 0 || i < *frames; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return 0
			case <-time.After(*interval):
			}
		}
		st, err := cl.LockStats(ctx, opts)
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			fmt.Fprintf(stderr, "lockapi top: %s\n", errText(err))
			return exitCode(err)
		}
		if *frames != 1 {
			fmt.Fprint(stdout, clearScreen)
		}
		printTop(stdout, st, time.Now())
	}
	return 0
}

// topArgs checks top's flags.
func topArgs(fs *flag.FlagSet, opts client.LockStatsOptions, interval time.Duration, frames int) error {
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case opts.Window < time.Minute || opts.Window > time.Hour || opts.Window%time.Minute != 0:
		return errors.New("--window must be whole minutes from 1m to 1h")
	case opts.Sort != client.SortByGrants && opts.Sort != client.SortByWaited && opts.Sort != client.SortByExpiries:
		return errors.New("--sort must be grants, waited or expiries")
	case opts.Limit < 1:
		return errors.New("--limit must be positive")
	case interval <= 0:
		return errors.New("--interval must be positive")
	case frames < 0:
		return errors.New("-n must not be negative")
	}
	return nil
}

// printTop writes one frame of lockapi top.
func printTop(w io.Writer, st *client.LockStats, now time.Time) {
	grants, expiries, forced := 0, 0, 0
	for _, m := range st.Minutes {
		grants, expiries, forced = grants+m.Grants, expiries+m.Expiries, forced+m.ForceReleases
	}
	fmt.Fprintf(w, "lockapi top - %s - last %v (sorted by %s): %d grants, %d expiries, %d force releases\n\n",
		now.Format(time.TimeOnly), st.Window, st.Sort, grants, expiries, forced)
	if len(st.Locks) == 0 {
		fmt.Fprintln(w, "no lock activity in the window")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "GRANTS\tEXPIRED\tFORCED\tHELD p50\tHELD p99\tWAITED p50\tWAITED p99\tQUEUE\t LOCK\t")
		for _, l := range st.Locks {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t %s\t\n", l.Grants, l.Expiries, l.ForceReleases,
				roundedDuration(l.HeldP50), roundedDuration(l.HeldP99), roundedDuration(l.WaitedP50), roundedDuration(l.WaitedP99), l.MaxQueue, l.Lock)
		}
		tw.Flush()
	}
	if len(st.Expiring) > 0 {
		var names []string
		for _, p := range st.Expiring {
			names = append(names, fmt.Sprintf("%s (%d)", orDash(p.Principal), p.Expiries))
		}
		fmt.Fprintf(w, "\nleases expired: %s\n", strings.Join(names, ", "))
	}
}

// roundedDuration writes d to the millisecond, or in seconds from 10s.
func roundedDuration(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}
