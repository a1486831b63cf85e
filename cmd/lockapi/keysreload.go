package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/metrics"
)

// keysPoll is how often the keys file is looked at for a change.
var keysPoll = 2 * time.Second

// keysReloader reads LOCKAPI_API_KEYS_FILE again on SIGHUP and when the
// file changes (its size, modification time or inode), and puts the keys
// it reads in force (auth.Keyring.Replace): a removed key is refused from
// then on, its event streams close and its dashboard sessions end. A file
// that does not read keeps the keys in force.
type keysReloader struct {
	c      serveConfig
	keys   *auth.Keyring
	log    zerolog.Logger
	errors atomic.Int64
	// seen is the file as last read; nil when it could not be.
	seen os.FileInfo
}

// watchKeys reloads the keys until ctx ends; SIGHUP asks at once.
func watchKeys(ctx context.Context, c serveConfig, keys *auth.Keyring, m *metrics.Metrics, log zerolog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	context.AfterFunc(ctx, func() { signal.Stop(hup) })
	k := &keysReloader{c: c, keys: keys, log: log}
	if c.APIKeysFile != "" {
		k.seen, _ = os.Stat(c.APIKeysFile) // read at start, after this
	}
	m.Counter("lockapi_keys_reload_errors_total", "Times the API keys file was read again and did not read: the keys in force stayed.",
		func() float64 { return float64(k.errors.Load()) })
	go k.run(ctx, hup)
}

func (k *keysReloader) run(ctx context.Context, hup <-chan os.Signal) {
	t := time.NewTicker(keysPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if k.c.APIKeysFile == "" {
				k.log.Info().Msg("SIGHUP: no API keys file to read again (LOCKAPI_API_KEYS_FILE)")
				continue
			}
			k.reload("SIGHUP")
		case <-t.C:
			if k.c.APIKeysFile != "" && k.changed() {
				k.reload("file changed")
			}
		}
	}
}

// changed reports whether the file is not the one last read.
func (k *keysReloader) changed() bool {
	fi, err := os.Stat(k.c.APIKeysFile)
	if err != nil || k.seen == nil {
		return (err == nil) != (k.seen == nil) // appeared, or went
	}
	return !os.SameFile(fi, k.seen) || !fi.ModTime().Equal(k.seen.ModTime()) || fi.Size() != k.seen.Size()
}

// reload reads the file and puts its keys in force, or logs why not.
func (k *keysReloader) reload(trigger string) {
	k.seen, _ = os.Stat(k.c.APIKeysFile) // before reading: a later change is seen
	next, err := k.read()
	if err != nil {
		k.errors.Add(1)
		ev := k.log.Error().Str("file", k.c.APIKeysFile).Str("trigger", trigger)
		if le, ok := errors.AsType[*auth.LineError](err); ok {
			ev = ev.Int("line", le.Line)
		}
		ev.Msgf("API keys file not reloaded: %v; the keys in force stay", err)
		return
	}
	added, removed := k.keys.Replace(next)
	k.log.Info().Str("file", k.c.APIKeysFile).Str("trigger", trigger).Int("added", added).Int("removed", removed).
		Int("keys", next.Len()).Int("expired", len(next.Expired(time.Now()))).Msg("API keys reloaded")
}

// read reads the keys of the file and of LOCKAPI_API_KEYS together.
func (k *keysReloader) read() (*auth.Keyring, error) {
	b, err := os.ReadFile(k.c.APIKeysFile)
	if err != nil {
		return nil, err
	}
	if _, err := auth.ParseKeys(string(b)); err != nil {
		return nil, err // its line numbers are the file's
	}
	next, err := auth.ParseKeys(k.c.APIKeys + "\n" + string(b))
	if err != nil {
		return nil, fmt.Errorf("a key of the file is configured in %s too", envName("api-keys"))
	}
	if next.Len() == 0 && k.keys.Len() > 0 {
		return nil, errors.New("no keys in it: the server would run open; restart it to run open")
	}
	return next, nil
}
