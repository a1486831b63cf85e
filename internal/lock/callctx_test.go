package lock

import (
	"context"
	"errors"
	"testing"
	"time"
)

type callCtxKey struct{}

func TestUncancellable_ignores_the_callers_cancel(t *testing.T) {
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), callCtxKey{}, "v"))
	ctx, stop := uncancellable(parent)
	defer stop()
	cancel()
	if err := ctx.Err(); err != nil {
		t.Fatalf("Err after the caller's cancel = %v, want nil", err)
	}
	select {
	case <-ctx.Done():
		t.Fatal("Done closed by the caller's cancel")
	default:
	}
	if v := ctx.Value(callCtxKey{}); v != "v" {
		t.Fatalf("Value = %v, want the caller's", v)
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) <= 0 || time.Until(d) > storeCallTimeout {
		t.Fatalf("Deadline = %v, %v; want within %v", d, ok, storeCallTimeout)
	}
}

func TestUncancellable_stop(t *testing.T) {
	for _, asked := range []string{"before", "after"} {
		t.Run("Done asked "+asked, func(t *testing.T) {
			ctx, stop := uncancellable(context.Background())
			child, cancelChild := context.WithCancel(ctx)
			defer cancelChild()
			if asked == "before" {
				_ = ctx.Done()
			}
			stop()
			if err := ctx.Err(); !errors.Is(err, context.Canceled) {
				t.Fatalf("Err = %v, want Canceled", err)
			}
			<-ctx.Done()
			<-child.Done()
		})
	}
}

func TestUncancellable_deadline(t *testing.T) {
	t.Run("passed, Done never asked", func(t *testing.T) {
		ctx, stop := uncancellableFor(context.Background(), -time.Second)
		defer stop()
		if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err = %v, want DeadlineExceeded", err)
		}
		<-ctx.Done()
	})
	t.Run("fires while waited on", func(t *testing.T) {
		ctx, stop := uncancellableFor(context.Background(), 10*time.Millisecond)
		defer stop()
		child, cancelChild := context.WithCancel(ctx)
		defer cancelChild()
		<-child.Done()
		if err := ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Err = %v, want DeadlineExceeded", err)
		}
	})
}
