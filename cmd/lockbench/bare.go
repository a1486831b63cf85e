package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/lockapi/lockapi/event"
	"github.com/lockapi/lockapi/internal/auth"
	lockhttp "github.com/lockapi/lockapi/internal/http"
	"github.com/lockapi/lockapi/internal/lock"
	"github.com/lockapi/lockapi/internal/store/memory"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
)

// The bare front is the smallest HTTP server that does what the load modes
// ask of lockapi: net/http's mux, lockapi's own store (on Redis, the same
// scripts called the same way, batched, recording events or not as the
// lockapi it is compared with), and lockapi's JSON answers (its errors
// too, as lockapi writes them), with none of lockapi's validation,
// authentication, logs or metrics. The server CPU
// that lockapi spends per pair beyond it is the cost of those.
//
// What the answer itself carries, and what keeps a server safe to expose,
// it has as lockapi does (issue 23 compares "with the same features"):
// net/http's read-header and idle timeouts, an X-Request-Id on every
// answer, and a signed release_url in every lease. Before 2026-11-27 it
// had none of the three (about 6 % of lockapi's CPU on the memory store).
//
// lockbench runs it as a child process (mode bare-front), so that its CPU
// is measured from /proc as lockapi's is.

// bareKeyPrefix starts the bare front's Redis keys, so that they never
// meet lockapi's.
const bareKeyPrefix = "lockbench-bare:"

// bareFront serves the acquire and release of one store.
type bareFront struct {
	st     lock.Store
	signer *auth.ReleaseSigner
}

func newBareFront(st lock.Store) (*bareFront, error) {
	signer, err := auth.NewReleaseSigner(auth.RandomSecret())
	if err != nil {
		return nil, err
	}
	return &bareFront{st: st, signer: signer}, nil
}

func (f *bareFront) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/locks/{name}/leases", f.acquire)
	mux.HandleFunc("DELETE /v1/locks/{name}/leases/{lease_id}", f.release)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		bareJSON(w, http.StatusOK, lockhttp.Status{Status: "ok"})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", ulid.Make().String())
		mux.ServeHTTP(w, r)
	})
}

func (f *bareFront) acquire(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Owner string `json:"owner"`
		TTLMs int64  `json:"ttl_ms"`
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := lock.AcquireRequest{Lock: r.PathValue("name"), Owner: b.Owner, TTL: time.Duration(b.TTLMs) * time.Millisecond}
	// Stores trust a validated request (internal/lock), as the server's
	// handlers validate it.
	if err := req.Validate(); err != nil {
		lockhttp.Error(w, r, err)
		return
	}
	g, err := f.st.TryAcquire(r.Context(), req)
	if err != nil {
		lockhttp.Error(w, r, err)
		return
	}
	l := g.Lease
	status := http.StatusCreated
	if !g.Fresh {
		status = http.StatusOK
	}
	md := l.Metadata
	if md == nil {
		md = map[string]string{}
	}
	w.Header().Set("Location", "/v1/locks/"+l.Lock+"/leases/"+l.ID)
	bareJSON(w, status, lockhttp.Lease{
		Lock: l.Lock, LeaseID: l.ID, Owner: l.Owner, Mode: lock.Exclusive, Limit: l.Limit,
		FencingToken: l.Token, HoldCount: l.HoldCount, TTLMs: l.TTL.Milliseconds(),
		AcquiredAt: l.AcquiredAt.UTC().Format(event.TimeFormat), ExpiresAt: l.ExpiresAt.UTC().Format(event.TimeFormat),
		Metadata: md, ReleaseURL: f.signer.ReleasePath(l.Lock, l.ID, l.ExpiresAt),
	})
}

func (f *bareFront) release(w http.ResponseWriter, r *http.Request) {
	res, err := f.st.Release(r.Context(), lock.LeaseRef{Lock: r.PathValue("name"), ID: r.PathValue("lease_id")}, false)
	if err != nil {
		lockhttp.Error(w, r, err)
		return
	}
	bareJSON(w, http.StatusOK, lockhttp.ReleaseResult{Lock: res.Lock, LeaseID: res.LeaseID, HoldCount: res.HoldCount, Released: res.Released})
}

func bareJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// runBareFront is the bare-front mode: it serves until interrupted, after
// writing "listening <URL>" on stdout.
func runBareFront(ctx context.Context, cfg *config, stdout io.Writer) error {
	var st lock.Store
	switch cfg.store {
	case "memory":
		st = memory.NewWithOptions(memory.Options{NoEvents: !cfg.events})
	case "redis":
		rdb, err := redisstore.NewClient(redisstore.ClientConfig{URL: cfg.redisURL})
		if err != nil {
			return err
		}
		defer rdb.Close()
		rs, err := redisstore.New(rdb, redisstore.Options{Prefix: cfg.keyPrefix, Batch: true, Events: cfg.events})
		if err != nil {
			return err
		}
		st = rs
	}
	defer st.Close()
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	front, err := newBareFront(st)
	if err != nil {
		return err
	}
	// lockapi's timeouts (internal/http's DefaultHeaderTimeout and idleTimeout).
	srv := &http.Server{Handler: front.routes(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintf(stdout, "listening http://%s\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// bareProc is a bare front that lockbench started.
type bareProc struct {
	cmd  *exec.Cmd
	url  string
	pid  int
	done chan error
	// stderr keeps what the bare front wrote to its stderr when lockbench's
	// log is not a file it can hand it: read once it exited.
	stderr bytes.Buffer
}

// startBareFront starts a bare front on store ("redis" or "memory"),
// recording events or not, as a child process of this one, and returns once
// it listens.
func startBareFront(ctx context.Context, cfg *config, store string, events bool, log io.Writer) (*bareProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "bare-front", "-listen", "127.0.0.1:0", "-store", store,
		"-events="+strconv.FormatBool(events), "-redis", cfg.redisURL, "-key-prefix", bareKeyPrefix)
	cmd.Env = append(os.Environ(), bareFrontEnv+"=1")
	p := &bareProc{cmd: cmd, done: make(chan error, 1)}
	// A file (lockbench's stderr) goes to the child as it is; any other
	// writer would be written by exec's copying goroutine while this one
	// writes it too.
	if f, ok := log.(*os.File); ok {
		cmd.Stderr = f
	} else {
		cmd.Stderr = &p.stderr
	}
	dieWithParent(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.pid = cmd.Process.Pid
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, out)
		p.done <- cmd.Wait()
	}()
	select {
	case l, ok := <-line:
		if u, found := strings.CutPrefix(l, "listening "); ok && found {
			p.url = u
			fmt.Fprintf(log, "lockbench: bare front (%s store, events %v) at %s, pid %d\n", store, events, p.url, p.pid)
			return p, nil
		}
		p.stop()
		return nil, fmt.Errorf("bare front on %s did not start%s", store, p.said())
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	p.stop()
	return nil, fmt.Errorf("bare front on %s: no answer in 10 s%s", store, p.said())
}

// said is what a stopped bare front wrote to the stderr it kept, for an
// error message.
func (p *bareProc) said() string {
	if p.stderr.Len() == 0 {
		return ""
	}
	return ": " + snippet(p.stderr.Bytes())
}

// bareFrontEnv is set in a bare front's environment: a test binary that
// finds it runs lockbench instead of its tests (see TestMain).
const bareFrontEnv = "LOCKBENCH_BARE_FRONT"

// stop interrupts the bare front and waits for it, killing it after 5 s.
func (p *bareProc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
