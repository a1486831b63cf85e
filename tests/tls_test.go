package tests

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/testkit/certtest"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// TestTLS_HTTPS runs lockapi with -tls-cert/-tls-key and talks to it as
// clients that do and do not trust its CA.
func TestTLS_HTTPS(t *testing.T) {
	certs := certtest.New(t)
	trusting := httpsClient(t, certs.CA.ClientConfig())
	s := startHTTPSServer(t, trusting, []string{"LOCKAPI_REDIS_URL="},
		"--tls-cert", certs.Server.CertFile, "--tls-key", certs.Server.KeyFile)

	t.Run("Healthz", func(t *testing.T) {
		resp := httpsDo(t, trusting, "GET", s.URL+"/healthz", "")
		if resp.Status != 200 || !strings.Contains(string(resp.Body), `"ok"`) {
			t.Fatalf("GET /healthz: %d %s", resp.Status, resp.Body)
		}
		if !hasLine(s.Logs(), `"url":"https://`+s.addr+`"`) {
			t.Errorf("no startup line names the https:// URL:\n%s", s.Logs())
		}
	})

	t.Run("AcquireRelease", func(t *testing.T) {
		r := httpsDo(t, trusting, "POST", s.URL+"/v1/locks/x/leases", `{"owner":"tls-client","ttl_ms":30000}`)
		if r.Status != 201 {
			t.Fatalf("acquire: %d %s", r.Status, r.Body)
		}
		var l Lease
		r.decode(t, &l)
		if l.Lock != "x" || l.Owner != "tls-client" || l.FencingToken == 0 || l.LeaseID == "" {
			t.Fatalf("lease = %+v", l)
		}
		if r := httpsDo(t, trusting, "POST", s.URL+"/v1/locks/x/leases", `{"owner":"someone-else"}`); r.Status != 409 {
			t.Fatalf("second acquire: %d %s, want 409", r.Status, r.Body)
		}
		rel := httpsDo(t, trusting, "DELETE", s.URL+"/v1/locks/x/leases/"+l.LeaseID, "")
		if rel.Status != 200 || !strings.Contains(string(rel.Body), `"released":true`) {
			t.Fatalf("release: %d %s", rel.Status, rel.Body)
		}
	})

	t.Run("OK_Localhost", func(t *testing.T) {
		// The certificate names localhost too; dial the address it listens on.
		cfg := certs.CA.ClientConfig()
		cfg.ServerName = "localhost"
		if r := httpsDo(t, httpsClient(t, cfg), "GET", s.URL+"/healthz", ""); r.Status != 200 {
			t.Fatalf("GET /healthz as localhost: %d %s", r.Status, r.Body)
		}
	})

	t.Run("ErrPlainHTTP", func(t *testing.T) {
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Get("http://" + s.addr + "/healthz")
		if err != nil {
			return // refused outright: fine
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		// net/http's TLS server answers a plain request with a bare 400 of
		// its own; lockapi's handlers, which set X-Request-ID, never see it.
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Request-ID") != "" {
			t.Fatalf("plain HTTP to the HTTPS port: %d %v %s", resp.StatusCode, resp.Header, body)
		}
	})

	t.Run("ErrUntrustedCA", func(t *testing.T) {
		other := certtest.NewCA(t, "other-ca")
		for name, cfg := range map[string]*tls.Config{
			"OtherCA":     other.ClientConfig(),
			"SystemRoots": {MinVersion: tls.VersionTLS12},
		} {
			t.Run(name, func(t *testing.T) {
				_, err := httpsClient(t, cfg).Get(s.URL + "/healthz")
				if _, ok := errors.AsType[x509.UnknownAuthorityError](err); !ok {
					t.Fatalf("GET /healthz: %v, want x509.UnknownAuthorityError", err)
				}
			})
		}
	})

	t.Run("ErrWrongHostName", func(t *testing.T) {
		cfg := certs.CA.ClientConfig()
		cfg.ServerName = "lockapi.example.com"
		_, err := httpsClient(t, cfg).Get(s.URL + "/healthz")
		if _, ok := errors.AsType[x509.HostnameError](err); !ok {
			t.Fatalf("GET /healthz: %v, want x509.HostnameError", err)
		}
	})

	t.Run("ErrTLS11", func(t *testing.T) {
		cfg := certs.CA.ClientConfig()
		cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
		_, err := httpsClient(t, cfg).Get(s.URL + "/healthz")
		if err == nil || !strings.Contains(err.Error(), "protocol version") {
			t.Fatalf("GET /healthz as a TLS 1.1 client: %v, want a protocol version alert (the server's minimum is TLS 1.2)", err)
		}
	})
}

// TestTLS_Redis runs lockapi on a redis-server that only speaks TLS with
// client certificates on the port lockapi is given.
func TestTLS_Redis(t *testing.T) {
	requireRedisTLS(t)
	// A shared server from the environment can't be given TLS arguments, and
	// redistest would skip; redis-server is in PATH, so run our own.
	t.Setenv(redistest.EnvURL, "")

	certs := certtest.New(t)
	_, tlsPort, err := net.SplitHostPort(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	rs := redistest.StartWith(t,
		"--tls-port", tlsPort,
		"--tls-cert-file", certs.Server.CertFile,
		"--tls-key-file", certs.Server.KeyFile,
		"--tls-ca-cert-file", certs.CA.CertFile,
		"--tls-auth-clients", "yes",
	)
	redisURL := "rediss://127.0.0.1:" + tlsPort + "/0"

	t.Run("ClientCert", func(t *testing.T) {
		s := startServer(t, nil, "--redis-url", redisURL, "--key-prefix", "tlstest:",
			"--redis-tls-ca", certs.CA.CertFile,
			"--redis-tls-cert", certs.Client.CertFile, "--redis-tls-key", certs.Client.KeyFile)
		a := newAPI(t, s)
		if r := a.must("GET", "/readyz", nil); r.Status != 200 {
			t.Fatalf("GET /readyz: %d %s\n%s", r.Status, r.Body, s.Logs())
		}
		if !hasLine(s.Logs(), `"redis":"`+redisURL+`"`) {
			t.Errorf("no startup line names %s:\n%s", redisURL, s.Logs())
		}
		l := a.mustAcquire("tls:redis", map[string]any{"owner": "a", "ttl_ms": 30000}, 201)

		// The lease is in this Redis (read here over its plain port).
		keys, err := rs.Client(t).Keys(context.Background(), "tlstest:*").Result()
		if err != nil || len(keys) == 0 {
			t.Fatalf("keys under tlstest: %q, %v; want the lock's keys", keys, err)
		}
		if st := a.state("tls:redis"); !st.Held || st.FencingToken != l.FencingToken {
			t.Fatalf("state = %+v, lease %+v", st, l)
		}
		if rel := a.release(l); rel.Status != 200 || !strings.Contains(string(rel.Body), `"released":true`) {
			t.Fatalf("release: %d %s", rel.Status, rel.Body)
		}
	})

	// Without a client certificate the server refuses the handshake: lockapi
	// starts (Redis may come later) but is not ready and fails requests.
	t.Run("ErrNoClientCert", func(t *testing.T) {
		s := startServer(t, nil, "--redis-url", redisURL, "--redis-tls-ca", certs.CA.CertFile)
		wantUnavailable(t, s, "remote error: tls:")
	})

	// Without -redis-tls-ca the server's certificate is not trusted.
	t.Run("ErrUntrustedServer", func(t *testing.T) {
		s := startServer(t, nil, "--redis-url", redisURL,
			"--redis-tls-cert", certs.Client.CertFile, "--redis-tls-key", certs.Client.KeyFile)
		wantUnavailable(t, s, "x509: certificate signed by unknown authority")
	})

	// A client certificate of another CA is refused like none at all.
	t.Run("ErrClientCertOfOtherCA", func(t *testing.T) {
		stranger := certtest.NewCA(t, "other-ca").Client(t, "stranger", "stranger")
		s := startServer(t, nil, "--redis-url", redisURL, "--redis-tls-ca", certs.CA.CertFile,
			"--redis-tls-cert", stranger.CertFile, "--redis-tls-key", stranger.KeyFile)
		wantUnavailable(t, s, "remote error: tls:")
	})
}

// wantUnavailable checks that s is up but not ready, that an acquire is
// answered 503 unavailable, and that s logged cause: the TLS failure, not
// some other reason to be unavailable.
func wantUnavailable(t *testing.T, s *server, cause string) {
	t.Helper()
	a := newAPI(t, s)
	r := a.must("GET", "/readyz", nil)
	if r.Status != 503 {
		t.Fatalf("GET /readyz: %d %s, want 503\n%s", r.Status, r.Body, s.Logs())
	}
	if p := r.problem(t); p.Type != problemType("unavailable") {
		t.Fatalf("GET /readyz: problem %+v, want unavailable", p)
	}
	if r := a.acquire("tls:redis", map[string]any{"owner": "a"}); r.Status != 503 {
		t.Fatalf("acquire: %d %s, want 503", r.Status, r.Body)
	}
	// The log is read from a pipe; give it a moment to catch up.
	for deadline := time.Now().Add(5 * time.Second); !hasLine(s.Logs(), cause); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line says %q:\n%s", cause, s.Logs())
		}
	}
}

// requireRedisTLS skips the test, or fails it when CI is set, unless a
// redis-server built with TLS is in PATH.
func requireRedisTLS(t *testing.T) {
	t.Helper()
	unavailable := func(msg string) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (failing rather than skipping because CI is set)", msg)
		}
		t.Skip(msg)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable("redis-server is not in PATH; the Redis TLS test needs one built with TLS (Debian's redis-server is)")
		return
	}
	// A build without TLS rejects the tls-port directive; a build with TLS
	// accepts it, then exits because it is told to listen nowhere.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "--port", "0", "--tls-port", "0", "--save", "", "--appendonly", "no").CombinedOutput()
	if bytes.Contains(out, []byte("Bad directive")) || bytes.Contains(out, []byte("FATAL CONFIG")) {
		unavailable(bin + " is built without TLS support (it rejects --tls-port); install a redis-server built with BUILD_TLS=yes, such as Debian's:\n" + strings.TrimSpace(string(out)))
	}
}

// httpsClient returns a client with its own transport using cfg.
func httpsClient(t *testing.T, cfg *tls.Config) *http.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// httpsDo sends a request with an optional JSON body and reads the answer.
func httpsDo(t *testing.T, c *http.Client, method, url, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Errorf("%s %s: not answered over TLS 1.2 or later: %+v", method, url, resp.TLS)
	}
	if resp.StatusCode >= 400 {
		var p struct {
			Status int `json:"status"`
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" || json.Unmarshal(b, &p) != nil || p.Status != resp.StatusCode {
			t.Errorf("%s %s: %d %s %s is not a matching problem+json", method, url, resp.StatusCode, ct, b)
		}
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// startHTTPSServer is startServer for a lockapi that serves HTTPS: it waits
// until /healthz answers through client, which must trust the server's CA.
func startHTTPSServer(t *testing.T, client *http.Client, env []string, args ...string) *server {
	t.Helper()
	return launch(t, "https", client, env, args...)
}
