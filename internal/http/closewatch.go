package http

import (
	"net"
	"sync/atomic"
	"time"
)

// aLongTimeAgo is a deadline in the past: it interrupts a blocked Read.
var aLongTimeAgo = time.Unix(1, 0)

// watchCloseByRead is watchClose on a goroutine that reads conn, as
// net/http's background reader does for a request it serves: an error means
// the client left, and a byte read is the start of the client's next
// request, kept for stop to return, and the watch ends.
func watchCloseByRead(conn net.Conn, gone func()) (stop func() []byte) {
	var stopping atomic.Bool
	read := make(chan []byte, 1)
	go func() {
		b := make([]byte, 1)
		n, err := conn.Read(b)
		switch {
		case n > 0:
			read <- b[:n]
			return
		case err != nil && !stopping.Load():
			gone()
		}
		read <- nil
	}()
	return func() []byte {
		stopping.Store(true)
		_ = conn.SetReadDeadline(aLongTimeAgo)
		b := <-read
		_ = conn.SetReadDeadline(time.Time{})
		return b
	}
}
