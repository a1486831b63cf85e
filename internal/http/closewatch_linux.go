package http

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rs/zerolog"
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
	if err != nil {
		return watchCloseByRead(conn, gone)
	}
	var id int32
	err = raw.Control(func(fd uintptr) { id, err = hangups.add(int(fd), gone) })
	if err != nil {
		return watchCloseByRead(conn, gone)
	}
	return func() []byte {
		_ = raw.Control(func(fd uintptr) { hangups.remove(id, int(fd)) })
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

// hangupWatch is an epoll instance and the one goroutine that waits on it.
// Should the wait fail, the watch must not quietly stop (hang-ups would go
// unseen from then on): the failure is logged and counted, and the watch
// restarts on a new instance with every connection watched; if no new
// instance can be had, new waits watch by reading (watchCloseByRead).
type hangupWatch struct {
	failures atomic.Int64
	// failNext makes the next wait fail, as a broken instance's does:
	// for tests.
	failNext atomic.Bool

	mu      sync.Mutex
	log     *zerolog.Logger // where failures are logged; nil: nowhere
	started bool
	epfd    int
	err     error // no instance: watch by reading
	next    int32
	watched map[int32]hangupEntry
}

// hangupEntry is a watched connection: its socket, and what to call when
// its client hangs up.
type hangupEntry struct {
	fd   int
	gone func()
}

// setLogger has the watch log its failures to logger (the server's).
func (h *hangupWatch) setLogger(logger *zerolog.Logger) {
	h.mu.Lock()
	h.log = logger
	h.mu.Unlock()
}

// add watches socket fd for its client hanging up; an error when it
// cannot.
func (h *hangupWatch) add(fd int, gone func()) (int32, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.started {
		h.started = true
		h.watched = make(map[int32]hangupEntry)
		h.epfd, h.err = h.newInstance()
	}
	if h.err != nil {
		return 0, h.err
	}
	h.next++
	ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: h.next}
	if err := unix.EpollCtl(h.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return 0, err
	}
	h.watched[h.next] = hangupEntry{fd: fd, gone: gone}
	return h.next, nil
}

// newInstance creates an epoll instance and its goroutine.
func (h *hangupWatch) newInstance() (int, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err == nil {
		go h.loop(epfd)
	}
	return epfd, err
}

// remove stops watching id, socket fd.
func (h *hangupWatch) remove(id int32, fd int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.watched[id]; ok {
		delete(h.watched, id)
		_ = unix.EpollCtl(h.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	}
}

// take forgets id and returns its gone, unless it was removed.
func (h *hangupWatch) take(id int32) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.watched[id]
	delete(h.watched, id)
	if !ok {
		return nil
	}
	return e.gone
}

// loop calls the gone of each connection whose peer hung up, until the
// wait on epfd fails.
func (h *hangupWatch) loop(epfd int) {
	events := make([]unix.EpollEvent, 256)
	for {
		n, err := unix.EpollWait(epfd, events, -1)
		if h.failNext.CompareAndSwap(true, false) {
			n, err = 0, unix.EBADF
		}
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			h.restart(epfd, err)
			return
		}
		for _, ev := range events[:n] {
			if gone := h.take(ev.Fd); gone != nil {
				gone()
			}
		}
	}
}

// restart replaces instance epfd, whose wait failed with err, with a new
// one that watches every watched connection, or else leaves new waits to
// watch by reading.
func (h *hangupWatch) restart(epfd int, err error) {
	h.failures.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	logger := h.log
	if logger == nil {
		nop := zerolog.Nop()
		logger = &nop
	}
	h.epfd, h.err = h.newInstance()
	_ = unix.Close(epfd)
	if h.err != nil {
		// Those watched go unseen: their waits end as usual (answer,
		// deadline, shutdown).
		logger.Error().Err(err).AnErr("restart", h.err).Int("unwatched", len(h.watched)).
			Msg("hang-up watch failed; parked requests watch by reading from now on")
		clear(h.watched)
		return
	}
	for id, e := range h.watched {
		ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: id}
		if err := unix.EpollCtl(h.epfd, unix.EPOLL_CTL_ADD, e.fd, &ev); err != nil {
			delete(h.watched, id)
		}
	}
	logger.Error().Err(err).Int("watched", len(h.watched)).Msg("hang-up watch failed; restarted")
}
