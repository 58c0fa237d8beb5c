//go:build !unix

package runners

import "os"

// openFlags: the type check after the open is all there is here.
const openFlags = os.O_RDONLY
