package http

// FailHangupWatch makes the hang-up watch's next wait fail, as a broken
// epoll instance's would, and returns the failures counted so far.
func FailHangupWatch() int64 {
	hangups.failNext.Store(true)
	return hangups.failures.Load()
}

// HangupWatchFailures returns the hang-up watch's failures counted.
func HangupWatchFailures() int64 { return hangups.failures.Load() }

// HangupsWatched returns the number of connections the hang-up watch holds.
func HangupsWatched() int {
	hangups.mu.Lock()
	defer hangups.mu.Unlock()
	return len(hangups.watched)
}

// FailNextWaitEnd makes the next wait's end panic before its answer.
func FailNextWaitEnd() { waitEndFault.Store(true) }
