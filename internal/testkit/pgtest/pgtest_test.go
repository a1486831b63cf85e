package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestStart(t *testing.T) {
	s := Start(t)
	db := s.DB(t)
	ctx := context.Background()

	var one int
	if err := db.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
	if s.proc == nil {
		return // an explicit server: its settings are not ours
	}
	for name, want := range map[string]string{"fsync": "off", "listen_addresses": "127.0.0.1"} {
		var got string
		if err := db.QueryRowContext(ctx, `SELECT current_setting($1)`, name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
}

func TestServer_DB_fresh_database_per_call(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	dbs := []*sql.DB{s.DB(t), s.DB(t)}

	var names [2]string
	for i, db := range dbs {
		if err := db.QueryRowContext(ctx, `SELECT current_database()`).Scan(&names[i]); err != nil {
			t.Fatal(err)
		}
	}
	if names[0] == names[1] {
		t.Fatalf("both DB calls got database %q", names[0])
	}
	if _, err := dbs[0].ExecContext(ctx, `CREATE TABLE only_in_first (id int)`); err != nil {
		t.Fatal(err)
	}
	var found bool
	if err := dbs[1].QueryRowContext(ctx, `SELECT to_regclass('only_in_first') IS NOT NULL`).Scan(&found); err != nil {
		t.Fatal(err)
	}
	if found {
		t.Error("a table created through one DB is visible through the other")
	}
}

// TestStart_no_orphans checks that the server runs unprivileged and that
// cleanup leaves neither the postmaster nor a backend behind, even with a
// connection still open.
func TestStart_no_orphans(t *testing.T) {
	if os.Getenv(EnvURL) != "" {
		t.Skipf("%s is set: the server is not ours to stop", EnvURL)
	}
	var postmaster, backend int
	t.Run("server", func(t *testing.T) {
		s := Start(t)
		postmaster = s.proc.cmd.Process.Pid
		db := s.DB(t)
		db.SetMaxIdleConns(1)
		if err := db.QueryRowContext(context.Background(), `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if uid := procUID(t, backend); uid == "0" {
				t.Errorf("backend %d runs as root", backend)
			}
		}
	})
	if t.Failed() {
		return
	}
	for _, pid := range []int{postmaster, backend} {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after cleanup (kill 0: %v)", pid, err)
		}
	}
}

// procUID returns the real uid of process pid from /proc.
func procUID(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			return strings.Fields(rest)[0]
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return ""
}

func TestWithDatabase(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:p@h:5432/postgres?sslmode=disable", "postgres://u:p@h:5432/x?sslmode=disable"},
		{"postgresql://h/", "postgresql://h/x"},
		{"host=h user=u dbname=postgres", "host=h user=u dbname=postgres dbname=x"},
	} {
		got, err := withDatabase(tc.in, "x")
		if err != nil || got != tc.want {
			t.Errorf("withDatabase(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
