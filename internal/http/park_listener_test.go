package http

import (
	"context"
	"net"
	"testing"
	"time"
)

// A connection handed back while the server closes: the closing callback
// that ends its idle wait may run after the wait has read the next
// request's first byte, while handBack goes on with the connection. Run
// under -race, this failed before the callback took a copy of its own of
// the connection (seen in CI as a race in client.TestAcquire_Wait).
func TestHandBack_closing_while_the_next_request_arrives(t *testing.T) {
	closing, closeNow := context.WithCancel(context.Background())
	closeNow()
	for range 200 {
		server, client := net.Pipe()
		l := &parkListener{handedIn: make(chan net.Conn), done: make(chan struct{}), idle: time.Minute, closing: closing}
		close(l.done) // nobody accepts: handBack closes what it would hand in
		go func() { _, _ = client.Write([]byte("G")) }()
		l.handBack(server, nil)
		_ = client.Close()
	}
}
