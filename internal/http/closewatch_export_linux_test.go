package http

// FailHangupWatch makes the hang-up watch's next wait fail, as a broken
// epoll instance's would, and returns the failures counted so far.
func FailHangupWatch() int64 {
	hangups.failNext.Store(true)
	return hangups.failures.Load()
}

// HangupWatchFailures returns the hang-up watch's failures counted.
func HangupWatchFailures() int64 { return hangups.failures.Load() }

// HangupsWatchedSince returns the number of connections the hang-up watch
// holds that it took after the last id given, and that last id now.
func HangupsWatchedSince(last int32) (n int, now int32) {
	hangups.mu.Lock()
	defer hangups.mu.Unlock()
	for id := range hangups.watched {
		if id > last {
			n++
		}
	}
	return n, hangups.next
}

// FailNextWaitEnd makes the next wait's end panic before its answer.
func FailNextWaitEnd() { waitEndFault.Store(true) }
