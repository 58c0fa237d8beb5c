//go:build !nymph_mock

package runners

const mockBuilt = false

// BuildTagged returns the runners that exist only in tagged builds: none
// in this build (the mock runner needs the nymph_mock tag).
func BuildTagged() []Runner { return nil }
