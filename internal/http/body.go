package http

import (
	"io"
	"net/http"
	"time"
)

// A request body is read whole, before routing, under one deadline
// (Config.BodyTimeout, 30 s): a client that sends its body slowly, or
// trickles it a byte at a time, or never sends it, holds a connection no
// longer than that, on every route. net/http would otherwise read a body
// no handler wanted without any deadline (it drains up to 256 KiB to reuse
// the connection), and a deadline left set after the body would end long
// polls and event streams, whose connection net/http then reads in the
// background. So:
//
//   - a body read in full clears the deadline at once; handlers read it
//     from memory (MaxBodyBytes at most);
//   - a body that fails (too slow, too large, broken) is answered by the
//     handler as before (decodeBody: 400 or 413), with Connection: close,
//     so that the answer is written rather than held behind a drain, and
//     the connection ends;
//   - a body announced larger than MaxBodyBytes is not read at all: the
//     handler answers (413), and the connection is closed.
//
// The header has ReadHeaderTimeout, and an idle connection IdleTimeout.

// readBodies is the middleware that reads bodies as said above. It must see
// net/http's own ResponseWriter, for the read deadline and for
// http.MaxBytesReader to close the connection of an oversized body.
func (s *Server) readBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
		if r.ContentLength > MaxBodyBytes {
			closeAfter(w, r)
			r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
			next.ServeHTTP(w, r)
			return
		}
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
		if err != nil {
			closeAfter(w, r)
			r.Body = &bufferedBody{err: err}
		} else {
			_ = rc.SetReadDeadline(time.Time{})
			r.Body = &bufferedBody{data: data}
		}
		next.ServeHTTP(w, r)
	})
}

// closeAfter marks r's connection to be closed after its answer. An
// HTTP/1 server then neither drains what is left of the body nor reads
// another request; HTTP/2 ends just the stream, which its flow control
// bounds.
func closeAfter(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
}

// bufferedBody is a request body that readBodies read: its bytes, or the
// error that ended reading it.
type bufferedBody struct {
	data []byte
	off  int
	err  error
}

func (b *bufferedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.off >= len(b.data) {
		return 0, io.EOF
	}
	n := copy(p, b.data[b.off:])
	b.off += n
	return n, nil
}

func (b *bufferedBody) Close() error { return nil }

// rest returns what is left of the body without copying it.
func (b *bufferedBody) rest() ([]byte, error) {
	if b.err != nil {
		return nil, b.err
	}
	data := b.data[b.off:]
	b.off = len(b.data)
	return data, nil
}

var _ io.ReadCloser = (*bufferedBody)(nil)

// bodyBytes is the body of r read whole: from memory when readBodies read
// it.
func bodyBytes(r *http.Request) ([]byte, error) {
	if b, ok := r.Body.(*bufferedBody); ok {
		return b.rest()
	}
	return readBody(r)
}
