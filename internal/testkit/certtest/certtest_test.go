package certtest_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/lockapi/lockapi/internal/testkit/certtest"
)

// TestNew_MutualTLS loads the written PEM files the way lockapi does and
// completes a handshake that verifies both sides.
func TestNew_MutualTLS(t *testing.T) {
	s := certtest.New(t)

	serverCert, err := tls.LoadX509KeyPair(s.Server.CertFile, s.Server.KeyFile)
	if err != nil {
		t.Fatalf("load server pair from disk: %v", err)
	}
	clientCert, err := tls.LoadX509KeyPair(s.Client.CertFile, s.Client.KeyFile)
	if err != nil {
		t.Fatalf("load client pair from disk: %v", err)
	}
	caPEM, err := os.ReadFile(s.CA.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s holds no PEM certificate", s.CA.CertFile)
	}
	if fi, err := os.Stat(s.Client.KeyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("client key file mode: %v, %v; want 0600", fi.Mode().Perm(), err)
	}

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
	srv.StartTLS()
	defer srv.Close()

	get := func(cfg *tls.Config) (string, error) {
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}

	t.Run("OK", func(t *testing.T) {
		got, err := get(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}})
		if err != nil || got != "lockapi-test-client" {
			t.Fatalf("got %q, %v; want the client's common name", got, err)
		}
	})
	t.Run("OK_SetClientConfig", func(t *testing.T) {
		if _, err := get(s.ClientConfig()); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("OK_Localhost", func(t *testing.T) {
		cfg := s.ClientConfig()
		cfg.ServerName = "localhost"
		if _, err := get(cfg); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ErrUnknownAuthority", func(t *testing.T) {
		other := certtest.NewCA(t, "other-ca")
		cfg := other.ClientConfig()
		cfg.Certificates = []tls.Certificate{clientCert}
		_, err := get(cfg)
		if _, ok := errors.AsType[x509.UnknownAuthorityError](err); !ok {
			t.Fatalf("err = %v, want x509.UnknownAuthorityError", err)
		}
	})
	t.Run("ErrWrongHost", func(t *testing.T) {
		cfg := s.ClientConfig()
		cfg.ServerName = "example.com"
		_, err := get(cfg)
		if _, ok := errors.AsType[x509.HostnameError](err); !ok {
			t.Fatalf("err = %v, want x509.HostnameError", err)
		}
	})
	t.Run("ErrNoClientCert", func(t *testing.T) {
		if _, err := get(s.CA.ClientConfig()); err == nil {
			t.Fatal("a client without a certificate got through")
		}
	})
	t.Run("ErrClientCertOfOtherCA", func(t *testing.T) {
		other := certtest.NewCA(t, "other-ca")
		cfg := s.CA.ClientConfig()
		cfg.Certificates = []tls.Certificate{other.Client(t, "stranger", "stranger").TLS}
		if _, err := get(cfg); err == nil {
			t.Fatal("a client certificate of another CA got through")
		}
	})
}

// TestServer_KeyUsage checks the extended key usages that OpenSSL (Redis)
// enforces: a server certificate is not a client one and vice versa.
func TestServer_KeyUsage(t *testing.T) {
	s := certtest.New(t)
	for _, c := range []struct {
		name  string
		cert  *x509.Certificate
		usage x509.ExtKeyUsage
		ok    bool
	}{
		{"ServerAsServer", s.Server.Cert, x509.ExtKeyUsageServerAuth, true},
		{"ServerAsClient", s.Server.Cert, x509.ExtKeyUsageClientAuth, false},
		{"ClientAsClient", s.Client.Cert, x509.ExtKeyUsageClientAuth, true},
		{"ClientAsServer", s.Client.Cert, x509.ExtKeyUsageServerAuth, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.cert.Verify(x509.VerifyOptions{Roots: s.CA.Pool(), KeyUsages: []x509.ExtKeyUsage{c.usage}})
			if (err == nil) != c.ok {
				t.Fatalf("verify: %v, want ok=%v", err, c.ok)
			}
		})
	}
}
