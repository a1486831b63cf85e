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
