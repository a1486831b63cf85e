// Package pgtest gives tests a real PostgreSQL server. Tests never mock the
// database: row locks and transaction order are what they check.
//
// Start looks for a server in this order:
//
//  1. LOCKAPI_TEST_POSTGRES_URL, an explicit server that may be shared; its
//     role needs CREATEDB, because every DB call gets a database of its own;
//  2. initdb and postgres from PATH or /usr/lib/postgresql/*/bin, run as a
//     child process on a free loopback port, with its data directory and
//     unix socket in a fresh temporary directory and fsync off, one fresh
//     cluster per call. PostgreSQL refuses to run as root, so under root
//     both run as the "postgres" user, or "nobody" if there is none;
//  3. otherwise the test is skipped, or fails when the CI variable is set, so
//     CI can't go green by silently skipping every Postgres test.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/lockapi/lockapi/internal/testkit/proctest"
)

// EnvURL names the environment variable holding an explicit server URL.
const EnvURL = "LOCKAPI_TEST_POSTGRES_URL"

const (
	// readyTimeout bounds every wait for a server to come up or go away.
	readyTimeout = 30 * time.Second
	// portAttempts is how often Start retries with a new port. The free port
	// is only probed, not held, so another process can take it before
	// postgres binds it.
	portAttempts = 5
	// superuser is the role initdb creates.
	superuser = "postgres"
)

// Server is a PostgreSQL server for one test.
type Server struct {
	// URL is a postgres:// URL of the server's maintenance database
	// (or the explicit URL).
	URL string

	proc *process // nil unless this package runs the server
}

// Start returns a running PostgreSQL server that lives until the end of tb.
// See the package doc for where the server comes from.
func Start(tb testing.TB) *Server {
	tb.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return fromURL(tb, u)
	}
	if bin, err := findBinDir(); err == nil {
		return startProcess(tb, bin)
	}
	const msg = "pgtest: no PostgreSQL available: install it (apt-get install postgresql, " +
		"which puts initdb and postgres in /usr/lib/postgresql/VERSION/bin), " +
		"or set " + EnvURL + "=postgres://user:password@host:port/db?sslmode=disable"
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s (failing rather than skipping because CI is set)", msg)
	}
	tb.Skip(msg)
	return nil
}

// NewDatabase creates an empty database on s, dropped when tb ends, and
// returns its URL.
func (s *Server) NewDatabase(tb testing.TB) string {
	tb.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "lockapi_test_" + hex.EncodeToString(b)
	ident := pgx.Identifier{name}.Sanitize()

	if err := s.admin(`CREATE DATABASE ` + ident); err != nil {
		tb.Fatalf("pgtest: create database %s (the role needs CREATEDB): %v", name, err)
	}
	tb.Cleanup(func() {
		// FORCE ends connections a failed test left open.
		if err := s.admin(`DROP DATABASE IF EXISTS ` + ident + ` WITH (FORCE)`); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	u, err := withDatabase(s.URL, name)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return u
}

// DB returns a database/sql handle (pgx driver) on a new empty database of
// s, closed and dropped when tb ends.
func (s *Server) DB(tb testing.TB) *sql.DB {
	tb.Helper()
	return Open(tb, s.NewDatabase(tb))
}

// Open opens dsn with the pgx database/sql driver, checks that it answers,
// and closes it when tb ends.
func Open(tb testing.TB, dsn string) *sql.DB {
	tb.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		tb.Fatalf("pgtest: open %s: %v", redact(dsn), err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		tb.Fatalf("pgtest: ping %s: %v", redact(dsn), err)
	}
	return db
}

// admin runs one statement on the server's maintenance database.
func (s *Server) admin(stmt string) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, stmt)
	return err
}

// withDatabase returns dsn, a URL or a keyword/value string, pointing at
// database name.
func withDatabase(dsn, name string) (string, error) {
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " dbname=" + name, nil // the last keyword wins
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("parse %q: %w", dsn, err)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// redact hides the password in a URL for messages.
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return "(a keyword/value DSN)"
}

// fromURL uses an explicit, possibly shared server. It must answer: a wrong
// URL is a configuration error, not a reason to skip.
func fromURL(tb testing.TB, u string) *Server {
	tb.Helper()
	s := &Server{URL: u}
	if err := s.admin(`SELECT 1`); err != nil {
		tb.Fatalf("pgtest: %s=%q does not answer: %v", EnvURL, redact(u), err)
	}
	return s
}

// findBinDir returns the directory holding initdb and postgres: PATH first,
// then the newest /usr/lib/postgresql/*/bin (Debian keeps them off PATH).
func findBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if isExec(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return majorOf(b) - majorOf(a) })
	for _, dir := range dirs {
		if isExec(filepath.Join(dir, "initdb")) && isExec(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", errors.New("initdb and postgres not found")
}

// majorOf returns the version in /usr/lib/postgresql/VERSION/bin.
func majorOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// process is one postgres server this package runs.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd.Wait has returned
}

// startProcess runs a fresh cluster owned by tb.
func startProcess(tb testing.TB, bin string) *Server {
	tb.Helper()
	cred, err := unprivileged()
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	// Not tb.TempDir: under root its parents are private to root, and
	// postgres runs as another user. Removed last, after the server stops.
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			tb.Fatalf("pgtest: %v", err)
		}
	}
	data := filepath.Join(dir, "data")

	initdb := command(cred, dir, filepath.Join(bin, "initdb"),
		"-D", data, "-U", superuser, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		tb.Fatalf("pgtest: %s: %v\n%s", initdb, err, out)
	}

	for range portAttempts {
		var port int
		if port, err = proctest.FreePort(); err != nil {
			break
		}
		var p *process
		if p, err = launch(cred, dir, bin, port); err == nil {
			tb.Cleanup(func() {
				if err := p.stop(); err != nil {
					tb.Errorf("pgtest: stop postgres: %v", err)
				}
			})
			return &Server{
				URL:  fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", superuser, port),
				proc: p,
			}
		}
	}
	tb.Fatalf("pgtest: start postgres: %v", err)
	return nil
}

// unprivileged returns the credential to run PostgreSQL with: nil when the
// test does not run as root, else the "postgres" user, or "nobody".
func unprivileged() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New(`running as root, and neither a "postgres" nor a "nobody" user exists to run PostgreSQL as (it refuses root)`)
}

// command prepares a PostgreSQL program run as cred (nil: as ourselves) in
// dir, with messages in English. Its process group is its own, so stop can
// kill the whole tree, and it gets SIGKILL if the test binary dies first.
func command(cred *syscall.Credential, dir, path string, args ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: cred,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	return cmd
}

// launch runs postgres on port and waits until it accepts connections. On
// error the process is gone and the error carries the tail of its log.
func launch(cred *syscall.Credential, dir, bin string, port int) (*process, error) {
	logPath := filepath.Join(dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor

	cmd := command(cred, dir, filepath.Join(bin, "postgres"),
		"-D", filepath.Join(dir, "data"),
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+dir,
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "shared_buffers=32MB",
		"-c", "max_connections=50",
		"-c", "lc_messages=C",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	if err := waitReady(dir, port, p.exited); err != nil {
		_ = p.stop()
		return nil, fmt.Errorf("%w\n--- tail of %s ---\n%s", err, logPath, proctest.Tail(logPath, 20))
	}
	return p, nil
}

// waitReady connects through the unix socket in dir, which only our server
// can have created, until the server accepts connections. postgres exits
// when it cannot bind its TCP address, so by then port is ours too.
func waitReady(dir string, port int, exited <-chan struct{}) error {
	dsn := fmt.Sprintf("host=%s port=%d user=%s dbname=postgres connect_timeout=2", dir, port, superuser)
	deadline := time.Now().Add(readyTimeout)
	err := errors.New("no answer yet")
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var conn *pgx.Conn
		if conn, err = pgx.Connect(ctx, dsn); err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("postgres exited before accepting connections on port %d (last probe: %v)", port, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("postgres not ready on port %d after %v: %v", port, readyTimeout, err)
}

// stop shuts the server down: a fast shutdown (SIGINT) ends the sessions and
// waits for every backend; if that hangs, SIGKILL goes to the whole process
// group, so no backend outlives the test.
func (p *process) stop() error {
	pgid := p.cmd.Process.Pid // Setpgid: the group is named after the leader
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.exited:
		// The postmaster exits only after its backends have.
		return nil
	case <-time.After(readyTimeout):
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.exited
	return fmt.Errorf("postgres (pid %d) ignored a fast shutdown for %v and was killed", pgid, readyTimeout)
}
