package http

import (
	"errors"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// watchClose calls gone, once, when the client of a parked request closes
// or resets conn, until stop; stop returns the bytes of the client's next
// request that the watch read (none here).
//
// On Linux one epoll instance watches every parked connection for the peer
// hanging up (EPOLLRDHUP): no goroutine and no buffer per connection. Bytes
// the client sends meanwhile (a pipelined request) stay in the socket for
// net/http. Where epoll cannot be had, a goroutine reads (watchCloseByRead).
func watchClose(conn net.Conn, gone func()) (stop func() []byte) {
	raw, err := rawConn(conn)
	if err == nil {
		err = hangups.start()
	}
	if err != nil {
		return watchCloseByRead(conn, gone)
	}
	id := hangups.add(gone)
	err = raw.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: id}
		err = unix.EpollCtl(hangups.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if err != nil {
		hangups.remove(id)
		return watchCloseByRead(conn, gone)
	}
	return func() []byte {
		hangups.remove(id)
		_ = raw.Control(func(fd uintptr) {
			_ = unix.EpollCtl(hangups.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
		})
		return nil
	}
}

// rawConn returns conn's socket.
func rawConn(conn net.Conn) (syscall.RawConn, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// hangups is the process's epoll instance for parked connections.
var hangups hangupWatch

type hangupWatch struct {
	once sync.Once
	epfd int
	err  error

	mu    sync.Mutex
	next  int32
	gones map[int32]func()
}

// start creates the epoll instance and its one goroutine, the first time.
func (h *hangupWatch) start() error {
	h.once.Do(func() {
		h.epfd, h.err = unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if h.err == nil {
			h.gones = make(map[int32]func())
			go h.loop()
		}
	})
	return h.err
}

func (h *hangupWatch) add(gone func()) int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	h.gones[h.next] = gone
	return h.next
}

// remove forgets id; it returns its gone unless that was called.
func (h *hangupWatch) remove(id int32) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	gone := h.gones[id]
	delete(h.gones, id)
	return gone
}

// loop calls the gone of each connection whose peer hung up.
func (h *hangupWatch) loop() {
	events := make([]unix.EpollEvent, 256)
	for {
		n, err := unix.EpollWait(h.epfd, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return // the instance is broken; parked requests time out as usual
		}
		for _, ev := range events[:n] {
			if gone := h.remove(ev.Fd); gone != nil {
				gone()
			}
		}
	}
}
