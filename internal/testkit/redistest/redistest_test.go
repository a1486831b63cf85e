package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/internal/testkit/proctest"
)

func TestStart(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	ctx := context.Background()

	if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v; want PONG", got, err)
	}
	if !s.CanRestart() {
		return
	}
	// A server we own must never write to disk: tests rely on Restart
	// losing data.
	for param, want := range map[string]string{"save": "", "appendonly": "no", "bind": "127.0.0.1"} {
		got, err := c.ConfigGet(ctx, param).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got[param] != want {
			t.Errorf("CONFIG GET %s = %q, want %q", param, got[param], want)
		}
	}
}

func TestStartWith(t *testing.T) {
	s := StartWith(t, "--maxmemory", "1mb")
	got, err := s.Client(t).ConfigGet(context.Background(), "maxmemory").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got["maxmemory"] != "1048576" {
		t.Errorf("maxmemory = %q, want 1048576", got["maxmemory"])
	}
}

func TestServer_Stop_Resume_loses_data(t *testing.T) {
	s := Start(t)
	if !s.CanRestart() {
		t.Skip("server can't be restarted")
	}
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	s.Stop(t)
	if conn, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("dial %s after Stop succeeded", s.Addr)
	}
	// A client without retries, so the failure is quick (go-redis still logs
	// one failed dial).
	down := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialerRetries: 1})
	defer down.Close()
	if err := down.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Stop succeeded")
	}

	s.Resume(t)
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Resume: err = %v, want redis.Nil", err)
	}

	// Restart is Stop plus Resume, on the same address.
	addr := s.Addr
	c.Set(ctx, "k", "v", 0)
	s.Restart(t)
	if s.Addr != addr {
		t.Errorf("Addr after Restart = %s, want %s", s.Addr, addr)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart: err = %v, want redis.Nil", err)
	}
}

func TestStart_two_servers_are_distinct(t *testing.T) {
	if os.Getenv(EnvURL) != "" {
		t.Skipf("%s is set: every Start shares that server", EnvURL)
	}
	a, b := Start(t), Start(t)
	if a.Addr == b.Addr {
		t.Fatalf("both servers on %s", a.Addr)
	}
	ctx := context.Background()
	if err := a.Client(t).Set(ctx, "k", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Client(t).Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET on second server: err = %v, want redis.Nil", err)
	}
}

// TestStart_parallel starts servers concurrently (run with -race) and checks
// that cleanup leaves no process behind, including after Stop.
func TestStart_parallel(t *testing.T) {
	if os.Getenv(EnvURL) != "" {
		t.Skipf("%s is set: no processes to check", EnvURL)
	}
	servers := make([]*Server, 6)
	t.Run("group", func(t *testing.T) {
		for i := range servers {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				s := Start(t)
				servers[i] = s
				if err := s.Client(t).Ping(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
				if i%2 == 0 && s.CanRestart() {
					s.Stop(t) // cleanup must cope with a stopped server
				}
			})
		}
	})
	for _, s := range servers {
		if s == nil || !s.CanRestart() {
			continue
		}
		if pid := s.node.PID(); pid != 0 {
			t.Errorf("%s: process %d still tracked after cleanup", s.Addr, pid)
		}
		if conn, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after cleanup", s.Addr)
		}
	}
}

// TestLaunch_failure_shows_log checks that a server that won't start is
// reported with its own words, not just a timeout.
func TestLaunch_failure_shows_log(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not in PATH")
	}
	port, err := proctest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n := &Node{bin: bin, dir: dir, port: port, args: serverArgs(port, dir, false, []string{"--no-such-directive", "1"})}
	n.addr = net.JoinHostPort("127.0.0.1", fmt.Sprint(port))

	err = n.launch()
	if err == nil {
		n.kill()
		t.Fatal("launch succeeded with a bad directive")
	}
	if !strings.Contains(err.Error(), "no-such-directive") {
		t.Errorf("error lacks the log tail naming the bad directive:\n%v", err)
	}
	if n.proc != nil {
		t.Error("failed launch left a process tracked")
	}
}

// TestLaunch_port_taken checks that a redis-server already on the port is
// not mistaken for ours.
func TestLaunch_port_taken(t *testing.T) {
	other := Start(t)
	if !other.CanRestart() {
		t.Skip("needs a redis-server started by redistest")
	}
	o := other.node
	dir := t.TempDir()
	n := &Node{bin: o.bin, dir: dir, port: o.port, addr: o.addr, args: serverArgs(o.port, dir, false, nil)}
	err := n.launch()
	if err == nil {
		n.kill()
		t.Fatal("launch succeeded on a port another server holds")
	}
	if !strings.Contains(err.Error(), "exited") {
		t.Errorf("err = %v, want it to say our redis-server exited", err)
	}
}
