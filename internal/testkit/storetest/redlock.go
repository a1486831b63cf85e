package storetest

import (
	"testing"
	"time"

	"github.com/lockapi/lockapi/internal/lock"
)

// notOnRedlock names the behaviours of lock kinds that redlock mode
// (internal/store/redlock) does not offer, with the reason;
// redlockRefusals checks that it refuses them instead.
var notOnRedlock = map[string]string{
	"Upgrade_is_refused":                                fairRefused,
	"Writers_do_not_starve":                             queueless,
	"Release_retry_of_an_ended_shared_lease_or_permit":  semaphoreRefused,
	"Semaphore_grants_its_limit":                        semaphoreRefused,
	"Semaphore_permits_are_not_reentrant":               semaphoreRefused,
	"Limit_mismatch":                                    semaphoreRefused,
	"Limit_is_forgotten_when_no_permit_is_held":         semaphoreRefused,
	"Expired_permit_comes_back":                         semaphoreRefused,
	"Released_permit_wakes_a_waiter":                    semaphoreRefused,
	"Waiter_sees_a_shortened_permit":                    semaphoreRefused,
	"Invalid_kind_requests_change_nothing":              semaphoreRefused,
	"Tokens_rise_across_modes":                          semaphoreRefused,
	"Idempotency_key_replays_shared_leases_and_permits": semaphoreRefused,
	"Abandon_drops_exactly_its_shared_hold_or_permit":   semaphoreRefused,
	"ForceRelease_ends_every_lease_of_the_name":         semaphoreRefused,
	"List_shows_shared_locks_and_semaphores":            semaphoreRefused,
	"Watch_sees_changes_of_every_kind":                  semaphoreRefused,
	"Fair_waiters_are_granted_in_arrival_order":         fairRefused,
	"Queue_holds_off_every_other_acquire":               queueless,
	"Who_joins_the_queue":                               queueless,
	"Queue_place_is_kept_until_granted":                 queueless,
	"Unrenewed_queue_place_lapses":                      queueless,
	"Leave_takes_a_place_out_and_wakes_the_next":        queueless,
	"Waiter_that_gives_up_leaves_the_queue":             queueless,
	"Keyed_fair_waiter_keeps_its_place_across_repeats":  fairRefused,
	"Reentry_is_never_held_off_by_the_queue":            queueless,
	"Fair_shared_heads_are_granted_together":            fairRefused,
	"Fair_permits_go_in_arrival_order":                  fairRefused,
}

const (
	semaphoreRefused = "refuses semaphores (checked by Redlock_refuses_semaphores_and_fair_locks)"
	fairRefused      = "refuses fair locks (checked by Redlock_refuses_semaphores_and_fair_locks)"
	queueless        = "queues no waiters: a waiter watches every master instead"
)

// redlockRefusals checks that a redlock store refuses semaphores and fair
// locks as unsupported, and that the refusal changes nothing.
func redlockRefusals(t *testing.T, b Backend) {
	s := b.Open(t)
	for _, req := range []lock.AcquireRequest{
		{Lock: "rl:sem", Owner: "o", TTL: time.Minute, Limit: 2},
		{Lock: "rl:fair", Owner: "o", TTL: time.Minute, Fair: true},
	} {
		_, err := s.TryAcquire(ctx, req)
		WantCode(t, err, lock.CodeUnsupported)
		if st := Inspect(t, s, req.Lock); st.Held || st.LastToken != 0 {
			t.Fatalf("a refused %+v changed %s: %+v", req, req.Lock, st)
		}
	}
}
