package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// overview is what `lockapi -h`, `lockapi --help` and `lockapi help` print:
// the commands, and where to read on. Each command's -h says the rest, in
// the same shape: a usage line, what it does, its flags, its exit status.
const overview = `lockapi: a lock service with fencing tokens, over HTTP and JSON.

usage: lockapi [COMMAND] [flags]

commands:
  serve      run the lock server (also what plain lockapi does)
  run        run a command while holding a lock, like flock(1) across machines
  status     print a lock's holders, fencing token and waiters
  events     print lock events as they happen
  history    print a lock's recent leases: holders, waits, how each ended
  top        show the hottest locks, refreshed every 2 s
  keys new   create an API key and the line that configures the server for it
  version    print lockapi's version and VCS revision (also -v, --version)
  help       print this text

Read on:
  lockapi COMMAND -h   a command's flags and exit status
  lockapi serve -h     every server setting, as a flag and a LOCKAPI_* variable
  README.md, docs/     the API, topologies, events, benchmarks, guarantees
`

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help"
}

// serveHelp is `lockapi serve -h`: the configuration table, by group.
func serveHelp() string {
	var b strings.Builder
	b.WriteString(`usage: lockapi serve [flags]

Runs the lock server. Every flag can also be set by the LOCKAPI_* variable
beside it; a flag wins over its variable. A setting that does not read
stops the server before it starts, with exit status 2.
`)
	var c serveConfig
	group := ""
	for _, s := range c.settings() {
		if s.group != group {
			group = s.group
			fmt.Fprintf(&b, "\n%s:\n", group)
		}
		def := ""
		if s.value.def != "" {
			def = ", default " + s.value.def
		}
		fmt.Fprintf(&b, "  --%s %s  (%s%s)\n", s.name, s.value.arg, envName(s.name), def)
		for _, line := range wrap(s.help, 70) {
			fmt.Fprintf(&b, "        %s\n", line)
		}
	}
	b.WriteString("\nCreate API keys with `lockapi keys new`. docs/CONFIGURATION.md says more about each setting.\n")
	return b.String()
}

// wrap breaks text into lines of at most width bytes, between words.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

// reportUsage writes a usage error of the command cmd: a line for each
// setting that does not read (it names the setting, its text and what is
// wanted), or else one line that says where the usage is.
func reportUsage(w io.Writer, cmd string, err error) {
	_, bad := errors.AsType[*badValue](err)
	if _, strict := errors.AsType[strictEnvError](err); bad || strict {
		for line := range strings.Lines(err.Error()) {
			fmt.Fprintf(w, "lockapi %s: %s\n", cmd, strings.TrimSuffix(line, "\n"))
		}
		return
	}
	fmt.Fprintf(w, "lockapi %s: %v (lockapi %s -h says more)\n", cmd, err, cmd)
}

// flagValues reads a command's flags through values, as serve's table does:
// a flag's text that does not read is a *badValue that names the flag, not
// the flag package's message and a page of usage.
type flagValues struct {
	fs   *flag.FlagSet
	errs []error
}

// newFlags returns the flags of the command name, which reports its own
// errors and usage.
func newFlags(name string) *flagValues {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagValues{fs: fs}
}

// bind adds the flag --name, read by v.
func (f *flagValues) bind(name string, v value) {
	f.fs.Func(name, "", func(s string) error {
		if err := v.set(s); err != nil {
			f.errs = append(f.errs, &badValue{from: "--" + name, text: s, secret: v.secret, why: err.Error()})
		}
		return nil
	})
}

// parse parses args; its error is the flag package's, or the values'.
func (f *flagValues) parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	return errors.Join(f.errs...)
}

// version is the release this binary is, set when a release is built:
//
//	go build -ldflags "-X main.version=v0.2.0" ./cmd/lockapi
//
// Without it, lockapi version prints what the Go toolchain recorded: the
// module version (a tag vX.Y.Z when the checkout is at one, else a
// pseudo-version) and the VCS revision (docs/UPGRADING.md, "Releases").
var version string

// versionCmd implements `lockapi version`: the release version, and the VCS
// revision the binary was built from, as the Go toolchain recorded them.
func versionCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if isHelp(args[0]) {
			fmt.Fprint(stdout, "usage: lockapi version\n\nPrints lockapi's release version (vX.Y.Z), the VCS revision it was built\nfrom and the Go version that built it.\n")
			return 0
		}
		reportUsage(stderr, "version", fmt.Errorf("unexpected argument %q", args[0]))
		return exitUsage
	}
	info, ok := debug.ReadBuildInfo()
	fmt.Fprint(stdout, versionText(version, info, ok))
	return 0
}

// versionText writes the release version (release, set at build; else the
// module version the build recorded) and what else the build recorded; a
// binary built without VCS information (go run, go test) says so.
func versionText(release string, info *debug.BuildInfo, ok bool) string {
	if !ok {
		if release != "" {
			return "lockapi " + release + "\n"
		}
		return "lockapi: no build information in this binary\n"
	}
	if release == "" {
		release = info.Main.Version
	}
	revision, modified := "unknown (built without VCS information)", ""
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision":
			revision = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			modified = " (with uncommitted changes)"
		}
	}
	return fmt.Sprintf("lockapi %s\nrevision: %s%s\ngo: %s\n", release, revision, modified, info.GoVersion)
}
