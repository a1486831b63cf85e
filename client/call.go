package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// call is one request of the operations without a lease: send makes it
// within timeout (c's request timeout unless larger), and an answer with
// status want is decoded into out (nil: its body is dropped). Any other
// answer is a *ProblemError (or *HeldError); a failed exchange wraps
// ErrUnavailable; a ctx that ended gives ctx's cause. what names the
// operation in errors, and lock the lock it is about ("" if none).
func (c *Client) call(ctx context.Context, what, lock string, timeout time.Duration, send func(context.Context) (*http.Response, error), want int, out any) error {
	rctx, cancel := context.WithTimeout(ctx, max(timeout, c.timeout))
	defer cancel()
	resp, err := send(rctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("lockapi: %s: %w", what, context.Cause(ctx))
	case err != nil:
		return fmt.Errorf("lockapi: %s: %w", what, unavailable(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("lockapi: %s: %w", what, unavailable(err))
	}
	if resp.StatusCode != want {
		return responseError(lock, resp, body)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("lockapi: %s: the server's answer: %w", what, err)
	}
	return nil
}
