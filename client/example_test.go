package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/lockapi/lockapi/client"
)

func ExampleClient_WithLock() {
	c, err := client.New("http://localhost:8080")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	err = c.WithLock(ctx, "deploy:prod", client.AcquireOptions{TTL: 30 * time.Second, Wait: time.Minute},
		func(ctx context.Context, l *client.Lease) error {
			// ctx is cancelled once the lease is known to be lost
			// (its loss watch tells within moments). Pass the fencing
			// token to what you write to.
			return deploy(ctx, l.Token())
		})
	var held *client.HeldError
	switch {
	case errors.As(err, &held):
		fmt.Printf("someone else is deploying: %s\n", held.Owner)
	case errors.Is(err, client.ErrLeaseLost):
		fmt.Println("lost the lock while deploying; the deploy may be incomplete")
	case err != nil:
		log.Fatal(err)
	}
}

func ExampleClient_Acquire() {
	c, err := client.New("http://localhost:8080")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.Acquire(ctx, "nightly-report", client.AcquireOptions{Owner: "report-runner"})
	if client.IsHeld(err) {
		return // another runner has it
	}
	if err != nil {
		log.Fatal(err)
	}
	work := make(chan error, 1)
	go func() { work <- buildReport(l.Token()) }()
	select {
	case err = <-work:
	case <-l.Lost():
		err = l.Err() // stop: someone else may hold the lock now
	}
	if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		log.Fatal(err)
	}
}

func deploy(ctx context.Context, token uint64) error { return nil }
func buildReport(token uint64) error                 { return nil }
