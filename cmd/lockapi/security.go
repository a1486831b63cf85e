package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
	redisstore "github.com/lockapi/lockapi/internal/store/redis"
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

// releaseSigner builds the release-URL signer of -release-secrets, or
// returns nil when none are configured.
func releaseSigner(c serveConfig) (*auth.ReleaseSigner, error) {
	if strings.TrimSpace(c.ReleaseSecrets) == "" {
		return nil, nil
	}
	var secrets [][]byte
	for _, s := range strings.Split(c.ReleaseSecrets, ",") {
		secrets = append(secrets, []byte(strings.TrimSpace(s)))
	}
	signer, err := auth.NewReleaseSigner(secrets...)
	if err != nil {
		return nil, fmt.Errorf("-release-secrets: %w", err)
	}
	return signer, nil
}

// secretRetry is how often a server that could not read the shared release
// secret from Redis at startup asks again.
var secretRetry = time.Second

// sharedReleaseSigner signs with the secret that every instance on this
// Redis shares (auth.SharedReleaseSecret), so that release URLs work on all
// of them and across restarts with nothing configured. While Redis does not
// answer, it signs with a random secret and keeps asking until ctx ends;
// once it has the shared secret, that signs, and the random one still
// verifies what was signed meanwhile. A value in Redis too short to be a
// secret is an error.
func sharedReleaseSigner(ctx context.Context, c serveConfig, rdb *redisstore.Client, log zerolog.Logger) (*auth.ReleaseSigner, error) {
	key := redisstore.ReleaseSecretKey(c.KeyPrefix)
	read := func() ([]byte, error) {
		rctx, cancel := context.WithTimeout(ctx, c.RedisTimeout)
		defer cancel()
		return auth.SharedReleaseSecret(rctx, rdb, key)
	}
	secret, err := read()
	if err == nil {
		signer, err := auth.NewReleaseSigner(secret)
		if err != nil {
			return nil, fmt.Errorf("%s: %w; delete it for a new one", key, err)
		}
		log.Info().Str("key", key).Msg("release URLs are signed with the secret kept in Redis")
		return signer, nil
	}
	random := auth.RandomSecret()
	signer, _ := auth.NewReleaseSigner(random)
	log.Warn().Err(err).Str("key", key).Msg("cannot read the release URL secret from Redis yet: signing with a random one until Redis answers")
	go func() {
		var secret []byte
		for err := errors.New("not read yet"); err != nil; {
			select {
			case <-ctx.Done():
				return
			case <-time.After(secretRetry):
				secret, err = read()
			}
		}
		if err := signer.SetSecrets(secret, random); err != nil {
			log.Error().Err(err).Str("key", key).Msg("bad release secret in Redis: release URLs stay signed with a random secret; delete the key and restart")
			return
		}
		log.Info().Str("key", key).Msg("release URLs are signed with the secret kept in Redis")
	}()
	return signer, nil
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
