// Package certtest gives tests a throwaway public key infrastructure: a CA,
// a server certificate for the loopback addresses and a client certificate,
// made with crypto/x509 and written as PEM files into the test's temporary
// directory, where lockapi, redis-server and Go clients can all load them.
//
// Keys are ECDSA P-256, quick to generate and accepted by Go and OpenSSL
// alike. Nothing here is fit for anything but tests.
package certtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// validity is how long around now a certificate is valid: a test's lifetime,
// with an hour of slack for clocks that disagree.
const (
	notBeforeSlack = time.Hour
	validFor       = 24 * time.Hour
)

// Set is a CA with one server and one client certificate it issued, the
// usual need of a TLS test.
type Set struct {
	CA     *CA
	Server *Pair // for 127.0.0.1, ::1 and localhost
	Client *Pair // client authentication, common name "lockapi-test-client"
}

// New writes a fresh Set into a new temporary directory of tb.
func New(tb testing.TB) *Set {
	tb.Helper()
	ca := NewCA(tb, "lockapi-test-ca")
	return &Set{
		CA:     ca,
		Server: ca.Server(tb, "server", "localhost", "127.0.0.1", "::1"),
		Client: ca.Client(tb, "client", "lockapi-test-client"),
	}
}

// ClientConfig returns a TLS client configuration that trusts only the
// Set's CA and presents its client certificate.
func (s *Set) ClientConfig() *tls.Config {
	cfg := s.CA.ClientConfig()
	cfg.Certificates = []tls.Certificate{s.Client.TLS}
	return cfg
}

// CA is a self-signed certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertFile is the CA certificate as PEM, the file a server or client is
	// told to trust.
	CertFile string
	// Dir is where the CA and the certificates it issues are written.
	Dir string
}

// Pair is an issued certificate and its key, in memory and on disk.
type Pair struct {
	Cert     *x509.Certificate
	TLS      tls.Certificate
	CertFile string // PEM certificate
	KeyFile  string // PEM PKCS #8 private key, mode 0600
}

// NewCA makes a CA called commonName, written to ca.pem in a new temporary
// directory of tb.
func NewCA(tb testing.TB, commonName string) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"lockapi tests"}},
		NotBefore:             time.Now().Add(-notBeforeSlack),
		NotAfter:              time.Now().Add(validFor),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("certtest: create CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("certtest: parse CA certificate: %v", err)
	}
	dir := tb.TempDir()
	ca := &CA{Cert: cert, Key: key, Dir: dir, CertFile: filepath.Join(dir, "ca.pem")}
	writePEM(tb, ca.CertFile, "CERTIFICATE", der, 0o644)
	return ca
}

// Pool returns a certificate pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}

// ClientConfig returns a TLS client configuration that trusts only the CA.
func (ca *CA) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
}

// Server issues a server certificate for hosts, each a DNS name or an IP
// address, written to NAME.pem and NAME-key.pem in the CA's directory.
func (ca *CA) Server(tb testing.TB, name string, hosts ...string) *Pair {
	tb.Helper()
	if len(hosts) == 0 {
		tb.Fatalf("certtest: server certificate %q for no host", name)
	}
	tmpl := ca.template(tb, hosts[0])
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(tb, name, tmpl)
}

// Client issues a client-authentication certificate for commonName, written
// to NAME.pem and NAME-key.pem in the CA's directory.
func (ca *CA) Client(tb testing.TB, name, commonName string) *Pair {
	tb.Helper()
	tmpl := ca.template(tb, commonName)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(tb, name, tmpl)
}

func (ca *CA) template(tb testing.TB, commonName string) *x509.Certificate {
	tb.Helper()
	return &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"lockapi tests"}},
		NotBefore:             time.Now().Add(-notBeforeSlack),
		NotAfter:              time.Now().Add(validFor),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
	}
}

func (ca *CA) issue(tb testing.TB, name string, tmpl *x509.Certificate) *Pair {
	tb.Helper()
	key := newKey(tb)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		tb.Fatalf("certtest: create certificate %q: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("certtest: parse certificate %q: %v", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("certtest: marshal key %q: %v", name, err)
	}
	p := &Pair{
		Cert:     cert,
		TLS:      tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert},
		CertFile: filepath.Join(ca.Dir, name+".pem"),
		KeyFile:  filepath.Join(ca.Dir, name+"-key.pem"),
	}
	writePEM(tb, p.CertFile, "CERTIFICATE", der, 0o644)
	writePEM(tb, p.KeyFile, "PRIVATE KEY", keyDER, 0o600)
	return p
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("certtest: generate key: %v", err)
	}
	return key
}

// serial returns a random 128-bit serial number, as RFC 5280 recommends.
func serial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		tb.Fatalf("certtest: serial number: %v", err)
	}
	return n
}

func writePEM(tb testing.TB, path, blockType string, der []byte, mode os.FileMode) {
	tb.Helper()
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	if err := os.WriteFile(path, data, mode); err != nil {
		tb.Fatalf("certtest: %v", err)
	}
}
