package memstate_test

import (
	"testing"

	"github.com/lockapi/lockapi/internal/testkit/statetest"
	"github.com/lockapi/lockapi/internal/webhook"
	"github.com/lockapi/lockapi/internal/webhook/memstate"
)

func TestConformance(t *testing.T) {
	statetest.Run(t, func(*testing.T) webhook.State { return memstate.New() })
}
