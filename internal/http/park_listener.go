package http

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"
)

// parkListener is the server's listener: it yields the connections it
// accepts and those handed back by parked requests once answered.
type parkListener struct {
	net.Listener
	accepted  chan accepted
	handedIn  chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
	// idle is how long a handed-back connection may wait for its next
	// request (the server's IdleTimeout), before net/http reads it under
	// its ReadHeaderTimeout; closing ends that wait (the server's).
	idle    time.Duration
	closing context.Context
}

type accepted struct {
	conn net.Conn
	err  error
}

func newParkListener(ln net.Listener, idle time.Duration, closing context.Context) *parkListener {
	l := &parkListener{Listener: ln, accepted: make(chan accepted), handedIn: make(chan net.Conn),
		done: make(chan struct{}), idle: idle, closing: closing}
	go l.acceptLoop()
	return l
}

// acceptLoop accepts for Accept, which also yields handed-back
// connections.
func (l *parkListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		select {
		case l.accepted <- accepted{c, err}:
		case <-l.done:
			if c != nil {
				_ = c.Close()
			}
			return
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// Accept implements net.Listener.
func (l *parkListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.handedIn:
		return c, nil
	case a := <-l.accepted:
		return a.conn, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *parkListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// handBack returns an answered parked request's connection to the server
// once the client sends its next request, as net/http keeps an idle
// keep-alive connection: up to the idle timeout, closed when the server
// closes. pending are bytes of that request already read.
func (l *parkListener) handBack(c net.Conn, pending []byte) {
	if len(pending) == 0 {
		// Wait here rather than in net/http, which would give the
		// connection only ReadHeaderTimeout to start its request.
		_ = c.SetReadDeadline(time.Now().Add(l.idle))
		// The callback has a copy of its own: c is rewrapped below, and
		// stop does not wait for a callback that has begun.
		conn := c
		stop := context.AfterFunc(l.closing, func() { _ = conn.SetReadDeadline(aLongTimeAgo) })
		b := make([]byte, 1)
		n, _ := c.Read(b)
		stop()
		_ = c.SetReadDeadline(time.Time{})
		if n == 0 {
			_ = c.Close() // idle too long, gone, or the server is closing
			return
		}
		pending = b
	}
	if rc, ok := c.(*replayConn); ok {
		rc.pending = pending // parked before: not wrapped twice
	} else {
		c = &replayConn{Conn: c, pending: pending}
	}
	select {
	case l.handedIn <- c:
	case <-l.done:
		_ = c.Close()
	}
}

// replayConn is a handed-back connection that first yields the bytes of
// its next request already read.
type replayConn struct {
	net.Conn
	pending []byte
}

// SyscallConn lets watchClose reach the socket.
func (c *replayConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

func (c *replayConn) Read(b []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
