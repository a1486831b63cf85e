package memory

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"sort"
	"strings"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// List implements lock.Store. Pages are in name order, so a page holds
// exactly up to Limit locks. A name is listed while any lease of it is
// live, of any mode, or while it is closed for a lock-delay.
//
// The cursor is the last name of the page, sealed (AES-GCM under a key of
// this store's own): the HTTP layer drops the names a key's patterns do not
// cover from the page, so a page may end on a name its caller must not
// learn, and a readable cursor would tell it. A sealed cursor tells nothing,
// and one not made by this store is refused.
func (m *Store) List(ctx context.Context, req lock.ListRequest) (lock.ListPage, error) {
	after := ""
	if req.Cursor != "" {
		name, ok := m.openCursor(req.Cursor)
		if !ok {
			return lock.ListPage{}, lock.Invalid(lock.FieldError{Field: "cursor", Detail: "not a cursor returned by this server"})
		}
		after = name
	}
	limit := req.Limit
	if limit <= 0 {
		limit = 100
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	listed := func(name string) bool {
		return strings.HasPrefix(name, req.Prefix) && name > after && req.Shows(name)
	}
	var names []string
	seen := make(map[string]bool)
	for name := range m.names {
		if !listed(name) {
			continue
		}
		if n := m.live(name, now); n != nil && n.held() {
			names = append(names, name)
			seen[name] = true
		}
	}
	for name := range m.delays {
		switch {
		case !now.Before(m.fences[name].delayedUntil):
			delete(m.delays, name)
		case listed(name) && !seen[name]:
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var page lock.ListPage
	if len(names) > limit {
		names = names[:limit]
		page.NextCursor = m.sealCursor(names[limit-1])
	}
	page.Locks = make([]lock.State, 0, len(names))
	for _, name := range names {
		page.Locks = append(page.Locks, m.state(name, now))
	}
	return page, nil
}

// newCursorSealer returns an AEAD under a fresh random key.
func newCursorSealer() cipher.AEAD {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return aead
}

// sealCursor returns the cursor that resumes after name.
func (m *Store) sealCursor(name string) string {
	nonce := make([]byte, m.cursors.NonceSize(), m.cursors.NonceSize()+len(name)+m.cursors.Overhead())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(m.cursors.Seal(nonce, nonce, []byte(name), nil))
}

// openCursor returns the name a cursor of sealCursor resumes after.
func (m *Store) openCursor(cursor string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || len(b) < m.cursors.NonceSize() {
		return "", false
	}
	n := m.cursors.NonceSize()
	name, err := m.cursors.Open(nil, b[:n], b[n:], nil)
	if err != nil || !lock.ValidName(string(name)) {
		return "", false
	}
	return string(name), true
}
