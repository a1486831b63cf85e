package lock

import (
	"context"
	"time"
)

// ChangeWaiting is a blocking query (WaitChange) that has looked, is
// registered with the store's watch and is about to sleep: BeginWaitChange's
// answer while the lock's index stays as the caller saw it. Wait sleeps
// until the index changes or the wait runs out; Park does the same with no
// goroutine while it sleeps (internal/http parks blocking queries so, as it
// parks waiting acquires: one per watched lease must cost little).
type ChangeWaiting struct {
	s           Store
	name, index string
	w           Watcher
	deadline    time.Time
	st          State // the last look's, the answer if the wait runs out

	answer func(State, error) // Park's
}

// BeginWaitChange looks at the lock as WaitChange does, up to its first
// sleep. With a nil *ChangeWaiting, st and err are WaitChange's answer.
// Otherwise the caller must call the ChangeWaiting's Wait or Park, once,
// for the answer.
func BeginWaitChange(ctx context.Context, s Store, name, index string, wait time.Duration) (_ State, _ *ChangeWaiting, err error) {
	st, err := s.Inspect(ctx, name)
	if err != nil || index == "" || st.Index != index || wait <= 0 {
		return st, nil, err
	}
	cw := &ChangeWaiting{s: s, name: name, index: index, deadline: time.Now().Add(wait)}
	if cw.w, err = s.Watch(ctx, name, WatchChanges); err != nil {
		return State{}, nil, err
	}
	looked := false
	defer func() {
		if !looked { // the look panicked: the watch goes
			cw.w.Close()
		}
	}()
	// Look again now that the watch is in effect: a change between the
	// first Inspect and Watch must not be missed.
	st, err, done := cw.look(ctx)
	looked = true
	if done {
		cw.w.Close()
		return st, nil, err
	}
	return State{}, cw, nil
}

// WaitChange returns the lock's state as soon as its index differs from
// index, or when wait has passed. An empty index returns at once.
func WaitChange(ctx context.Context, s Store, name, index string, wait time.Duration) (State, error) {
	st, cw, err := BeginWaitChange(ctx, s, name, index, wait)
	if cw == nil {
		return st, err
	}
	return cw.Wait(ctx)
}

// look reads the lock: done when its index changed (or the read failed).
func (cw *ChangeWaiting) look(ctx context.Context) (State, error, bool) {
	st, err := cw.s.Inspect(ctx, cw.name)
	if err != nil || st.Index != cw.index {
		return st, err, true
	}
	cw.st = st
	if next, ok := nextUnpublished(st); ok {
		cw.w.ExpectExpiry(time.Now().Add(next))
	}
	return st, nil, false
}

// Wait sleeps until the index changes, the deadline or ctx's end: Park with
// the caller's goroutine blocked for the answer.
func (cw *ChangeWaiting) Wait(ctx context.Context) (State, error) {
	return waitFor(ctx, cw.Park)
}

// Park is Wait for a caller that keeps no goroutine while the wait sleeps,
// as Waiting.Park is: it returns at once and calls answer once, on a
// goroutine of its own; its caller calls wake once ctx has ended.
func (cw *ChangeWaiting) Park(ctx context.Context, answer func(State, error)) (wake func()) {
	p := newParking(ctx, cw, cw.deadline)
	cw.answer = answering(p, answer)
	return p.start()
}

// sleeping implements parkable: the watch, and no retry.
func (cw *ChangeWaiting) sleeping() (Watcher, time.Time) { return cw.w, time.Time{} }

// step implements parkable: one round of WaitChange's loop. A wake-up
// looks again; the deadline answers the last look, as it always did.
func (cw *ChangeWaiting) step(ctx context.Context) (answer func()) {
	woke := false
	select {
	case <-cw.w.C():
		woke = true
	default:
	}
	if err := ctx.Err(); err != nil {
		return cw.abort(ctx, err)
	}
	if woke {
		if st, err, done := cw.look(ctx); done {
			return cw.answering(st, err)
		}
	}
	if !time.Now().Before(cw.deadline) {
		return cw.answering(cw.st, nil)
	}
	return nil
}

// answering is the wait's end: the watch goes, then the answer.
func (cw *ChangeWaiting) answering(st State, err error) func() {
	return func() {
		_ = recovered(cw.w.Close)
		cw.answer(st, err)
	}
}

// abort implements parkable: the wait's end with err.
func (cw *ChangeWaiting) abort(_ context.Context, err error) func() {
	return cw.answering(State{}, err)
}
