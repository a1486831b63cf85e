package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/lockapi/lockapi/client"
	"github.com/lockapi/lockapi/event"
)

const eventsUsage = `usage: lockapi events [flags]

Prints every change of the locks as it happens, one line per event: time,
type, lock, owner, fencing token and the holds left. It runs until
interrupted (SIGINT, SIGTERM), and rides out a dropped connection or a
server restart: it resumes after the last event it printed, and says on
stderr why and where from each time it reconnects.

Flags:
  --server URL   lockapi server (default $LOCKAPI_SERVER, else http://localhost:8080)
  --lock NAME    only the events of the lock NAME
  --prefix P     only the events of locks whose names start with P
  --types T,...  only these types: granted, reentered, renewed, released,
                 expired, force_released
  --after ID     start after the event ID (a previous run's last), or with
                 the oldest event the server keeps (--after 0), rather than
                 with the next event
  --json         print each event as a JSON object, one per line

$LOCKAPI_API_KEY, when set, is sent as the bearer token; the key's name
patterns decide which locks' events are shown.

Exit status: 0 when interrupted; 2 usage error, input the server refused,
or an --after older than the server's event log keeps; 69 the server was
unavailable, failed or records no events; 77 the server refused the API key.
`

// eventsCmd implements `lockapi events`.
func eventsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below
	fs.Usage = func() {}
	server := fs.String("server", defaultServer(), "")
	var opts client.EventsOptions
	fs.StringVar(&opts.Lock, "lock", "", "")
	fs.StringVar(&opts.Prefix, "prefix", "", "")
	types := fs.String("types", "", "")
	fs.StringVar(&opts.After, "after", "", "")
	asJSON := fs.Bool("json", false, "")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, eventsUsage)
		return 0
	} else if err != nil {
		reportUsage(stderr, "events", err)
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		reportUsage(stderr, "events", fmt.Errorf("unexpected argument %q", fs.Arg(0)))
		return exitUsage
	case opts.Lock != "" && opts.Prefix != "":
		reportUsage(stderr, "events", errors.New("--lock and --prefix do not go together"))
		return exitUsage
	}
	if *types != "" {
		for t := range strings.SplitSeq(*types, ",") {
			opts.Types = append(opts.Types, client.EventType(strings.TrimSpace(t)))
		}
	}

	cl, err := newClient(*server)
	if err != nil {
		fmt.Fprintf(stderr, "lockapi events: %s\n", errText(err))
		return exitUsage
	}
	opts.OnReconnect = func(err error, after string, pause time.Duration) {
		from := "after " + after
		switch after {
		case "":
			from = "with the next event"
		case "0":
			from = "with the oldest event kept"
		}
		fmt.Fprintf(stderr, "lockapi events: the stream ended (%s); reconnecting in %v, resuming %s\n", errText(err), pause.Round(time.Millisecond), from)
	}
	for ev, err := range cl.Events(ctx, opts) {
		if err != nil {
			return eventsError(ctx, err, stderr)
		}
		if *asJSON {
			line, _ := json.Marshal(newEventJSON(ev))
			fmt.Fprintf(stdout, "%s\n", line)
		} else {
			fmt.Fprintln(stdout, eventLine(ev))
		}
	}
	return 0
}

// eventsError explains why the events stopped, and returns the exit status.
func eventsError(ctx context.Context, err error, stderr io.Writer) int {
	if ctx.Err() != nil {
		return 0 // interrupted: the way to stop
	}
	fmt.Fprintf(stderr, "lockapi events: %s\n", errText(err))
	if pe, ok := errors.AsType[*client.ProblemError](err); ok && pe.Type == problemEventsGone {
		fmt.Fprintln(stderr, "lockapi events: start again without --after")
	}
	return exitCode(err)
}

// eventLine is an event for people: time, type, lock, owner, token, holds.
func eventLine(ev client.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-14s  %s  owner=%s  token=%d  holds=%d", event.FormatTime(ev.Time), ev.Type, ev.Lock, ev.Owner, ev.Token, ev.HoldCount)
	if ev.Shared {
		b.WriteString("  shared")
	}
	if ev.Type == client.EventForceReleased && ev.Principal != "" {
		fmt.Fprintf(&b, "  by=%s", ev.Principal)
	}
	return b.String()
}

// newEventJSON returns ev as the API wrote it.
func newEventJSON(ev client.Event) event.Event {
	out := event.Event{
		ID: ev.ID, Type: string(ev.Type), Lock: ev.Lock, Owner: ev.Owner, Principal: ev.Principal,
		Mode: "exclusive", FencingToken: ev.Token, HoldCount: ev.HoldCount, Time: event.FormatTime(ev.Time), LeaseID: ev.LeaseID,
	}
	if ev.Shared {
		out.Mode = "shared"
	}
	if ev.QueueLength >= 0 {
		out.QueueLength = &ev.QueueLength
	}
	return out
}
