package fifoclient

import (
	"context"
	"errors"

	"github.com/nymphd/nymph/hostio/transport"
)

// errNeedsPOSIX is what New returns on Windows: the transport is named
// pipes (mkfifo) opened non-blocking and watched with poll(2), which
// Windows has none of.
var errNeedsPOSIX = errors.New("fifoclient: the fifo transport needs a POSIX system (named FIFOs); on Windows use the direct or the spool transport")

func supported() error { return errNeedsPOSIX }

// openPair has nothing to hold on Windows: New refuses before any lane
// opens.
type openPair struct{}

func (*Client) exchange(context.Context, *lane, string) (*transport.Response, error) {
	return nil, errNeedsPOSIX
}
