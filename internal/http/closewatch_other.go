//go:build !linux

package http

import (
	"net"
	"sync/atomic"

	"github.com/rs/zerolog"
)

// watchClose calls gone, once, when the client of a parked request closes
// or resets conn, until stop; stop returns the bytes of the client's next
// request that the watch read.
func watchClose(conn net.Conn, gone func()) (stop func() []byte) {
	return watchCloseByRead(conn, gone)
}

// hangups has no epoll instance to fail here.
var hangups hangupWatch

type hangupWatch struct{ failures atomic.Int64 }

func (h *hangupWatch) setLogger(*zerolog.Logger) {}
