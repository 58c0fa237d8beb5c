// Package idpath names the directory of a run, a setup or an exec after
// its id. It decides the mapping from the ids the wire allows to plain
// file names, not where the directories go or what is in them.
package idpath

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"

	"github.com/nymphd/nymph/wirecore/wire"
)

// plain is what an id must look like to be its directory's name as it
// is: nothing that could climb out of a root, start an option, or split
// a docker -v argument (a colon).
var plain = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*$`)

// MaxName bounds the names Name takes: a file name's usual 255 bytes,
// less the hash it may add.
const MaxName = 255 - 9

// Name is the directory name of id: id itself when it is plain, else
// (the wire lets an id hold ":@+=", and start with "." or "-") id with
// every other byte made "_" and a hash of the exact id appended, so two
// ids that map alike never share a directory. An id the wire does not
// allow (a slash, a control byte, empty, too long) is refused.
func Name(id string) (string, error) {
	if len(id) > MaxName {
		return "", fmt.Errorf("idpath: id of %d bytes is longer than a directory name allows (%d)", len(id), MaxName)
	}
	if plain.MatchString(id) {
		return id, nil
	}
	if v := wire.CheckID("id", id, MaxName); v != nil {
		return "", fmt.Errorf("idpath: %q is not a plain file name: %s", id, v.Message)
	}
	b := []byte(id)
	for i, c := range b {
		keep := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' ||
			i > 0 && (c == '.' || c == '-')
		if !keep {
			b[i] = '_'
		}
	}
	sum := sha256.Sum256([]byte(id))
	return string(b) + "-" + hex.EncodeToString(sum[:4]), nil
}

// Plain reports whether name is a directory name Name can give.
func Plain(name string) bool { return plain.MatchString(name) }
