package memstate_test

import (
	"testing"

	"github.com/lockapi/lockapi/internal/webhook"
	"github.com/lockapi/lockapi/internal/webhook/memstate"
	"github.com/lockapi/lockapi/internal/webhook/statetest"
)

func TestConformance(t *testing.T) {
	statetest.Run(t, func(*testing.T) webhook.State { return memstate.New() })
}
