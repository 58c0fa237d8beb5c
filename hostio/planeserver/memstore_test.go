package planeserver_test

import (
	"testing"

	"github.com/nymphd/nymph/hostio/planeserver"
	"github.com/nymphd/nymph/hostio/planeserver/storetest"
)

func TestMemStore(t *testing.T) {
	storetest.Run(t, func(*testing.T) planeserver.Store { return planeserver.NewMemStore() })
}
