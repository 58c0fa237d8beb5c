package wire

import (
	"slices"
	"strconv"

	"github.com/tinylib/msgp/msgp"
)

// Extensions of protocol "1" that nymph negotiates (docs/protocol.md,
// "Extensions"). A daemon announces the ones it speaks in its hello
// (HelloRequest.Extensions); the control plane answers with the ones it
// will use with this daemon, under ConfigExtensions in the hello reply's
// config map. Each side uses an extension only when both named it, so a
// peer that speaks plain protocol "1" — which sends neither — sees nothing
// new.
const (
	// ExtCancel: the plane may send a KindCancel command; the daemon
	// stops that one run or exec and reports it killed.
	ExtCancel = "cancel"
	// ExtDrain: a draining daemon tells the plane on its poll
	// (PollRequest.Draining), and the plane answers its parked poll at
	// once, with no commands.
	ExtDrain = "drain"
	// ExtCursor: at-most-once delivery. The plane numbers every command it
	// hands a worker (PollResponse.Cursor, the last number of the reply),
	// the daemon sends the last number it applied (PollRequest.Cursor,
	// HelloRequest.Cursor), and the plane forgets what is at or below it
	// and hands out again what is past it; the daemon skips a command id
	// it has applied already.
	ExtCursor = "cursor"
	// ExtConfig: live configuration (liveconfig.go). The plane sends the
	// worker's settings in the hello reply's config map and, when they
	// change, in PollResponse.Config; the daemon applies them at once.
	// Its capability refreshes carry a generation
	// (PollRequest.CapabilitiesGen), so the plane never takes an older
	// snapshot over a newer one.
	ExtConfig = "config"
)

// KnownExtensions are the extensions this build speaks, in a fixed order.
var KnownExtensions = [...]string{ExtCancel, ExtDrain, ExtCursor, ExtConfig}

// ExtSet is a set of known extensions as bits, one per KnownExtensions
// entry: what a peer agreed to, kept as one byte and asked on every poll
// (Has walks the four known names, not the agreed list).
type ExtSet uint8

// ExtSetOf is the set of the known extensions in list; unknown names are
// left out.
func ExtSetOf(list []string) ExtSet {
	var s ExtSet
	for i, e := range KnownExtensions {
		if slices.Contains(list, e) {
			s |= 1 << i
		}
	}
	return s
}

// Has reports whether ext is in s; false for an unknown name.
func (s ExtSet) Has(ext string) bool {
	for i, e := range KnownExtensions {
		if e == ext {
			return s&(1<<i) != 0
		}
	}
	return false
}

// ConfigExtensions is the key of the hello reply's config map that lists
// the extensions the plane agreed to, as an array of strings.
const ConfigExtensions = "nymph_extensions"

// MaxExtensions bounds an announced list: more is refused by the decoder
// of a HelloRequest (arrays are bounded) and ignored past this count when
// read from a config map.
const MaxExtensions = 32

// AgreedExtensions is the part of offered that this build knows, in
// KnownExtensions order, without duplicates: what a plane answers a daemon
// that offered offered.
func AgreedExtensions(offered []string) []string {
	var out []string
	for _, e := range KnownExtensions {
		if slices.Contains(offered, e) {
			out = append(out, e)
		}
	}
	return out
}

// EncodeExtensions is the config map value that names exts.
func EncodeExtensions(exts []string) msgp.Raw {
	b := msgp.AppendArrayHeader(nil, uint32(len(exts)))
	for _, e := range exts {
		b = msgp.AppendString(b, e)
	}
	return b
}

// ConfigExtensionsOf reads the extensions a hello reply's config agreed
// to: the known ones among them, nil when the key is absent or is not an
// array of strings (a plane that does not negotiate).
func ConfigExtensionsOf(config map[string]msgp.Raw) []string {
	raw, ok := config[ConfigExtensions]
	if !ok {
		return nil
	}
	n, rest, err := msgp.ReadArrayHeaderBytes(raw)
	if err != nil || n > MaxExtensions {
		return nil
	}
	var named []string
	for ; n > 0; n-- {
		var s string
		if s, rest, err = msgp.ReadStringBytes(rest); err != nil {
			return nil
		}
		named = append(named, s)
	}
	return AgreedExtensions(named)
}

// FormatCursor is a cursor as the wire carries it: decimal digits.
func FormatCursor(n uint64) *string {
	s := strconv.FormatUint(n, 10)
	return &s
}

// ParseCursor reads a cursor; nil, empty or anything but decimal digits
// (a plane's own opaque cursor) is 0, "nothing applied".
func ParseCursor(s *string) uint64 {
	if s == nil {
		return 0
	}
	n, err := strconv.ParseUint(*s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}
