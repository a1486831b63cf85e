package webhook

import (
	"context"
	"time"
)

// SendOnce makes one delivery attempt of a small message to url.
func SendOnce(p Policy, url string) Attempt {
	s := newSender(p, 5*time.Second, 1)
	sub := Subscription{ID: "t", URL: url, Secrets: []string{NewSecret()}}
	return s.send(context.Background(), sub, "1-0", []byte(`{}`), kindLive)
}

// AtWork counts the workers with an event at hand: trying it, waiting for
// a slot or for the next try.
func (s *Service) AtWork() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.workers {
		if w.head.Load() != 0 {
			n++
		}
	}
	return n
}
