package redis_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockapi/lockapi/fence"
	fenceredis "github.com/lockapi/lockapi/fence/redis"
	"github.com/lockapi/lockapi/internal/testkit/redistest"
)

// admitLuaSHA1 pins admit.lua. A change to the script must change this too,
// so it can't drift unnoticed: servers cache scripts by this hash.
const admitLuaSHA1 = "5a30bbb4e9f0bf2901e1f0bebb0411bfa6f499df"

// redisGuard returns a guard on a real Redis and a key prefix unique to t;
// the test's keys are deleted when it ends, in case the server is shared.
func redisGuard(t *testing.T) (fenceredis.Guard, *redis.Client, func(string) string) {
	t.Helper()
	c := redistest.Start(t).Client(t)
	prefix := "fence-test:" + t.Name() + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		keys, err := c.Keys(ctx, prefix+"*").Result()
		if err == nil && len(keys) > 0 {
			err = c.Del(ctx, keys...).Err()
		}
		if err != nil {
			t.Errorf("delete test keys: %v", err)
		}
	})
	return fenceredis.Guard{Client: c}, c, func(name string) string { return prefix + name }
}

func get(t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return "(none)"
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestAdmitLua_hash_pinned(t *testing.T) {
	src, err := os.ReadFile("admit.lua")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	if got := hex.EncodeToString(sum[:]); got != admitLuaSHA1 {
		t.Fatalf("admit.lua has SHA1 %s, pinned %s: review the change, then update admitLuaSHA1", got, admitLuaSHA1)
	}
	_, c, _ := redisGuard(t)
	if got, err := c.ScriptLoad(context.Background(), string(src)).Result(); err != nil || got != admitLuaSHA1 {
		t.Fatalf("SCRIPT LOAD admit.lua = %s, %v; want %s", got, err, admitLuaSHA1)
	}
}

func TestGuard_Admit(t *testing.T) {
	g, c, key := redisGuard(t)
	ctx := context.Background()

	t.Run("ErrStale_41_after_42", func(t *testing.T) {
		k := key("stale")
		if err := g.Admit(ctx, k, 42); err != nil {
			t.Fatal(err)
		}
		if err := g.Admit(ctx, k, 41); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("token 41 after 42: err = %v, want ErrStale", err)
		}
		if got := get(t, c, k); got != "42" {
			t.Errorf("token key = %s after a stale token, want 42", got)
		}
	})

	t.Run("OK_equal_42_twice", func(t *testing.T) {
		k := key("equal")
		for i := range 2 {
			if err := g.Admit(ctx, k, 42); err != nil {
				t.Fatalf("token 42, time %d: %v", i+1, err)
			}
		}
	})

	t.Run("OK_higher", func(t *testing.T) {
		k := key("higher")
		for _, token := range []uint64{0, 1, 41, 42, 1000} {
			if err := g.Admit(ctx, k, token); err != nil {
				t.Fatalf("token %d: %v", token, err)
			}
		}
		if got := get(t, c, k); got != "1000" {
			t.Errorf("token key = %s, want 1000", got)
		}
	})

	// Real tokens are microseconds since 1970, about 2^51: Lua must neither
	// round them nor store them as 1.7e+15.
	t.Run("OK_large_tokens_exact", func(t *testing.T) {
		k := key("large")
		for _, token := range []uint64{1_763_820_000_000_000, 1_763_820_000_000_001, fence.MaxToken - 1, fence.MaxToken} {
			if err := g.Admit(ctx, k, token); err != nil {
				t.Fatalf("token %d: %v", token, err)
			}
			if got, want := get(t, c, k), strconv.FormatUint(token, 10); got != want {
				t.Fatalf("token key = %s, want %s", got, want)
			}
		}
		if err := g.Admit(ctx, k, fence.MaxToken-1); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("MaxToken-1 after MaxToken: err = %v, want ErrStale", err)
		}
	})

	t.Run("ErrTokenRange", func(t *testing.T) {
		if err := g.Admit(ctx, key("range"), fence.MaxToken+1); !errors.Is(err, fence.ErrTokenRange) {
			t.Fatalf("err = %v, want ErrTokenRange", err)
		}
	})

	t.Run("ErrNoResource", func(t *testing.T) {
		if err := g.Admit(ctx, "", 1); !errors.Is(err, fence.ErrNoResource) {
			t.Fatalf("err = %v, want ErrNoResource", err)
		}
	})

	t.Run("Err_token_key_not_a_number", func(t *testing.T) {
		k := key("garbage")
		if err := c.Set(ctx, k, "not a token", 0).Err(); err != nil {
			t.Fatal(err)
		}
		err := g.Admit(ctx, k, 1)
		if err == nil || errors.Is(err, fence.ErrStale) {
			t.Fatalf("err = %v, want a script error", err)
		}
	})
}

func TestGuard_Write(t *testing.T) {
	g, c, key := redisGuard(t)
	ctx := context.Background()

	t.Run("OK", func(t *testing.T) {
		tk, dk := key("{a}:fence"), key("{a}:data")
		if err := g.Write(ctx, tk, dk, 42, "by 42"); err != nil {
			t.Fatal(err)
		}
		if got := get(t, c, dk); got != "by 42" {
			t.Errorf("data = %q, want %q", got, "by 42")
		}
		// Same lease, next write.
		if err := g.Write(ctx, tk, dk, 42, "by 42 again"); err != nil {
			t.Fatal(err)
		}
		if got := get(t, c, dk); got != "by 42 again" {
			t.Errorf("data = %q, want %q", got, "by 42 again")
		}
	})

	t.Run("ErrStale_leaves_data", func(t *testing.T) {
		tk, dk := key("{b}:fence"), key("{b}:data")
		if err := g.Write(ctx, tk, dk, 42, "by 42"); err != nil {
			t.Fatal(err)
		}
		if err := g.Write(ctx, tk, dk, 41, "by 41"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("write with token 41 after 42: err = %v, want ErrStale", err)
		}
		if got := get(t, c, dk); got != "by 42" {
			t.Errorf("data = %q after a stale write, want %q", got, "by 42")
		}
		if got := get(t, c, tk); got != "42" {
			t.Errorf("token key = %s after a stale write, want 42", got)
		}
	})

	t.Run("ErrStale_after_Admit_writes_nothing", func(t *testing.T) {
		tk, dk := key("{c}:fence"), key("{c}:data")
		if err := g.Admit(ctx, tk, 42); err != nil {
			t.Fatal(err)
		}
		if err := g.Write(ctx, tk, dk, 41, "by 41"); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("err = %v, want ErrStale", err)
		}
		if got := get(t, c, dk); got != "(none)" {
			t.Errorf("data = %q after a stale write, want none", got)
		}
	})

	t.Run("ErrNoResource", func(t *testing.T) {
		if err := g.Write(ctx, key("{d}:fence"), "", 1, "v"); !errors.Is(err, fence.ErrNoResource) {
			t.Fatalf("err = %v, want ErrNoResource", err)
		}
	})
}

// TestGuard_Write_concurrent has many writers race with rising tokens.
// Each write is either admitted or stale, and the fence ends at the highest
// token with that token's value.
func TestGuard_Write_concurrent(t *testing.T) {
	g, c, key := redisGuard(t)
	ctx := context.Background()
	tk, dk := key("{acct}:fence"), key("{acct}:data")

	const (
		writers = 16
		each    = 50
		base    = 1_763_820_000_000_000 // a realistic microsecond token
	)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted int
		errs     []error
	)
	start := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			<-start
			// Writer w owns tokens base+w, base+w+writers, ...: rising per
			// writer, interleaved across writers.
			for i := range each {
				token := uint64(base + w + i*writers)
				err := g.Write(ctx, tk, dk, token, strconv.FormatUint(token, 10))
				mu.Lock()
				switch {
				case err == nil:
					admitted++
				case !errors.Is(err, fence.ErrStale):
					errs = append(errs, err)
				}
				mu.Unlock()
				if rand.N(4) == 0 {
					// Yield now and then, so writers overtake each other.
					_ = c.Ping(ctx).Err()
				}
			}
		})
	}
	// A reader watches the fence while the writers run: it must never go
	// down.
	stop := make(chan struct{})
	watched := make(chan error, 1)
	go func() {
		var last uint64
		for {
			select {
			case <-stop:
				watched <- nil
				return
			default:
			}
			v, err := c.Get(ctx, tk).Uint64()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				watched <- err
				return
			}
			if v < last {
				watched <- fmt.Errorf("the fence went down from %d to %d", last, v)
				return
			}
			last = v
		}
	}()
	close(start)
	wg.Wait()
	close(stop)
	if err := <-watched; err != nil {
		t.Error(err)
	}

	if len(errs) > 0 {
		t.Fatalf("%d writes failed, first: %v", len(errs), errs[0])
	}
	want := strconv.FormatUint(base+writers*each-1, 10)
	if got := get(t, c, tk); got != want {
		t.Errorf("token key = %s, want the highest token %s", got, want)
	}
	if got := get(t, c, dk); got != want {
		t.Errorf("data = %s, want the highest token's value %s", got, want)
	}
	t.Logf("%d of %d writes admitted", admitted, writers*each)
}

// TestImports_no_SQL: a program that guards only Redis resources pulls in
// no SQL driver through this package.
func TestImports_no_SQL(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "database/sql" || strings.HasPrefix(pkg, "github.com/jackc/") {
			t.Errorf("fence/redis depends on %s", pkg)
		}
	}
}
