package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/lockapi/lockapi/internal/auth"
)

// loadKeys reads the API keys from -api-keys and -api-keys-file.
func loadKeys(c serveConfig) (*auth.Keyring, error) {
	text := c.APIKeys
	if c.APIKeysFile != "" {
		b, err := os.ReadFile(c.APIKeysFile)
		if err != nil {
			return nil, fmt.Errorf("-api-keys-file: %w", err)
		}
		text += "\n" + string(b)
	}
	return auth.ParseKeys(text)
}

// releaseSigner builds the release-URL signer; with no secrets configured it
// uses a random one and says so, because such URLs die with the process and
// do not work across instances.
func releaseSigner(c serveConfig) (signer *auth.ReleaseSigner, random bool, err error) {
	if strings.TrimSpace(c.ReleaseSecrets) == "" {
		return nil, true, nil // the HTTP server makes a random one
	}
	var secrets [][]byte
	for _, s := range strings.Split(c.ReleaseSecrets, ",") {
		secrets = append(secrets, []byte(strings.TrimSpace(s)))
	}
	signer, err = auth.NewReleaseSigner(secrets...)
	if err != nil {
		return nil, false, fmt.Errorf("-release-secrets: %w", err)
	}
	return signer, false, nil
}

// serverTLS returns the HTTPS configuration, or nil to serve plain HTTP.
func serverTLS(c serveConfig) (*tls.Config, error) {
	if c.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("-tls-cert/-tls-key: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// redisTLS completes the TLS configuration that a rediss:// URL asked for
// with a CA bundle and a client certificate. TLS files with a plain redis://
// URL are a mistake, not a request to upgrade silently.
func redisTLS(c serveConfig, cfg *tls.Config) error {
	if c.RedisTLSCA == "" && c.RedisTLSCert == "" {
		return nil
	}
	if cfg == nil {
		return errors.New("-redis-tls-* need a rediss:// URL")
	}
	if c.RedisTLSCA != "" {
		pem, err := os.ReadFile(c.RedisTLSCA)
		if err != nil {
			return fmt.Errorf("-redis-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("-redis-tls-ca: no PEM certificate in %s", c.RedisTLSCA)
		}
		cfg.RootCAs = pool
	}
	if c.RedisTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.RedisTLSCert, c.RedisTLSKey)
		if err != nil {
			return fmt.Errorf("-redis-tls-cert/-redis-tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return nil
}
