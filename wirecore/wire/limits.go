package wire

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nymphd/nymph/wirecore/ulid"
)

// What nymph's control plane accepts from a daemon, and how long it waits
// for it. Each limit lives here once: the plane core validates with it,
// nymph serve enforces the sizes and timeouts with it, and
// docs/protocol.md ("Limits and timeouts") lists it for implementers.

// MaxCollectionEntries bounds the entries an array or map may announce:
// a longer one is refused before anything is allocated for it (a count is
// 4 bytes; its elements would be far more). The //msgp:limit directives of
// the message files repeat the number, because the generator reads no
// constants; a test checks that the generated code agrees.
const MaxCollectionEntries = 65536

// Body sizes nymph serve accepts per route; a larger body is answered 413.
const (
	// MaxControlBodyBytes bounds hello, poll and presign bodies.
	MaxControlBodyBytes = 1 << 20
	// MaxResultBodyBytes bounds acks (result blobs), exec results (1 MiB
	// of stdout and of stderr, plus room for the envelope) and operator
	// requests.
	MaxResultBodyBytes = 16 << 20
	// MaxChunkBodyBytes bounds one log chunk.
	MaxChunkBodyBytes = 8 << 20
)

// How long nymph serve waits for a request's bytes (nginx's
// client_header_timeout and client_body_timeout, with an overall bound
// so a body trickled one byte at a time ends too). A body that misses
// either bound is answered 408 and its connection closed.
const (
	// HeaderTimeout bounds reading a request's headers.
	HeaderTimeout = 10 * time.Second
	// BodyIdleTimeout bounds the wait for the next byte of a body.
	BodyIdleTimeout = 10 * time.Second
	// BodyTimeout bounds reading a whole body, plus one second for every
	// BodyBytesPerSecond bytes it announces (its route's limit when it
	// announces no length): a 16 MiB ack gets 188 s, a poll 60 s.
	BodyTimeout = 60 * time.Second
	// BodyBytesPerSecond is the slowest rate BodyTimeout's allowance
	// for a body's size assumes.
	BodyBytesPerSecond = 128 << 10
	// IdleConnTimeout bounds how long a kept-alive connection may sit
	// without a request.
	IdleConnTimeout = 120 * time.Second
	// MaxHeaderBytes bounds a request's header block (431 past it).
	MaxHeaderBytes = 64 << 10
)

// BodyDeadline is how long a body of announced bytes may take to arrive
// in whole: base (BodyTimeout, or a host's own) plus the allowance for
// its size.
func BodyDeadline(base time.Duration, announced int64) time.Duration {
	return base + time.Duration(max(announced, 0))*time.Second/BodyBytesPerSecond
}

// Large bodies: a body over LargeBodyBytes takes one of a few slots for as
// long as its request is being handled, so that a burst of 16 MiB acks
// cannot hold more than that many in memory at once. A body that finds no
// free slot waits for one; after LargeBodyWait it is answered 503 with
// Retry-After.
const (
	LargeBodyBytes = 1 << 20
	// DefaultMaxLargeBodies is how many large bodies nymph serve holds at
	// once unless told otherwise.
	DefaultMaxLargeBodies = 2
	LargeBodyWait         = 30 * time.Second
	// LargeBodyRetryAfterS is the Retry-After of that 503, in seconds.
	LargeBodyRetryAfterS = 5
)

// Lengths and counts of the fields a control plane stores. A value past
// its limit is answered 422 {error, field, message}.
const (
	// MaxIDBytes bounds an id: machine_id, exec_id, invocation_id. Ids
	// are 1 to MaxIDBytes of the bytes IDChars allows.
	MaxIDBytes = 256
	// MaxWorkerIDBytes bounds a worker_id: room for a provisional id,
	// {machine_id}-{ULID}, of the longest machine_id.
	MaxWorkerIDBytes = MaxIDBytes + 1 + ulid.Len
	// MaxLabelBytes bounds a hello's label.
	MaxLabelBytes = 256
	// MaxTags bounds a hello's tags; MaxTagBytes each of them.
	MaxTags     = 64
	MaxTagBytes = 256
	// MaxLanes bounds a hello's lanes; MaxQueueBytes each of them, and a
	// poll's queue.
	MaxLanes      = 64
	MaxQueueBytes = 256
	// MaxRunners bounds capabilities.runners.
	MaxRunners = 64
	// MaxGPUs bounds versions.gpu.
	MaxGPUs = 64
	// MaxNameBytes bounds every other short string a hello or poll
	// carries (runner kinds, versions, the CPU model, GPU fields, the
	// public key, an invocation's state) and an ack's error type.
	MaxNameBytes = 256
	// MaxPathBytes bounds capabilities.workdir (Linux's PATH_MAX).
	MaxPathBytes = 4096
)

// IDChars lists the bytes an id may hold besides ASCII letters and
// digits: what host names, ULIDs, UUIDs and "setup-{id}" need, and
// nothing that means something in a URL path or a file name.
const IDChars = "._:@+=-"

// Codes of a 422's error key.
const (
	InvalidMissingField = "missing_field"
	InvalidEmpty        = "empty"
	InvalidTooLong      = "too_long"
	InvalidTooMany      = "too_many"
	InvalidCharacter    = "invalid_character"
	InvalidUTF8         = "invalid_utf8"
	InvalidControlChar  = "control_character"
)

func invalid(code, field, format string, args ...any) *ValidationError {
	return &ValidationError{Error: code, Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// CheckID checks an id of at most maxBytes bytes (MaxIDBytes, or
// MaxWorkerIDBytes for a worker id): not empty, and only letters, digits
// and IDChars.
func CheckID(field, id string, maxBytes int) *ValidationError {
	switch {
	case id == "":
		return invalid(InvalidEmpty, field, "an id must not be empty")
	case len(id) > maxBytes:
		return invalid(InvalidTooLong, field, "%d bytes; an id has at most %d", len(id), maxBytes)
	}
	for i := 0; i < len(id); i++ {
		if !isIDByte(id[i]) {
			return invalid(InvalidCharacter, field, "byte %d is %q; an id holds only ASCII letters, digits and %q", i, id[i], IDChars)
		}
	}
	return nil
}

// isIDByte is one table load: every poll checks its worker id, byte by
// byte.
func isIDByte(c byte) bool { return idBytes[c] }

// idBytes marks the bytes an id may hold.
var idBytes = func() (set [256]bool) {
	for c := range 256 {
		b := byte(c)
		set[c] = 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte(IDChars, b) >= 0
	}
	return set
}()

// CheckText checks a string of at most maxBytes bytes: valid UTF-8 (a
// msgpack str is UTF-8), without control characters (they would reach an
// operator's terminal and logs).
func CheckText(field, s string, maxBytes int) *ValidationError {
	if len(s) > maxBytes {
		return invalid(InvalidTooLong, field, "%d bytes; at most %d", len(s), maxBytes)
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return invalid(InvalidUTF8, field, "invalid UTF-8 at byte %d", i)
		case unicode.IsControl(r):
			return invalid(InvalidControlChar, field, "control character %U at byte %d", r, i)
		}
		i += size
	}
	return nil
}

// CheckTexts checks a list of at most maxEntries strings, each by
// CheckText.
func CheckTexts(field string, list []string, maxEntries, maxBytes int) *ValidationError {
	if len(list) > maxEntries {
		return invalid(InvalidTooMany, field, "%d entries; at most %d", len(list), maxEntries)
	}
	for i, s := range list {
		if v := CheckText(field, s, maxBytes); v != nil {
			v.Message = fmt.Sprintf("%s (entry %d)", v.Message, i)
			return v
		}
	}
	return nil
}

func checkOptText(field string, s *string, maxBytes int) *ValidationError {
	if s == nil {
		return nil
	}
	return CheckText(field, *s, maxBytes)
}

// Validate checks a hello against the limits above; nil when it fits.
// The first violation found is reported, its field a dotted path.
func (h *HelloRequest) Validate() *ValidationError {
	if v := CheckID("machine_id", h.MachineID, MaxIDBytes); v != nil {
		return v
	}
	if v := CheckText("label", h.Label, MaxLabelBytes); v != nil {
		return v
	}
	if v := CheckTexts("tags", h.Tags, MaxTags, MaxTagBytes); v != nil {
		return v
	}
	if v := CheckTexts("lanes", h.Lanes, MaxLanes, MaxQueueBytes); v != nil {
		return v
	}
	if v := h.Capabilities.validate("capabilities"); v != nil {
		return v
	}
	if v := h.Versions.validate(); v != nil {
		return v
	}
	return checkOptText("public_key", h.PublicKey, MaxNameBytes)
}

func (c *Capabilities) validate(field string) *ValidationError {
	if v := CheckTexts(field+".runners", c.Runners, MaxRunners, MaxNameBytes); v != nil {
		return v
	}
	return CheckText(field+".workdir", c.Workdir, MaxPathBytes)
}

// Tidy makes the probed versions one line each: a probe's output may be
// several (`runsc --version` prints two), and spec 001 takes whatever the
// probe printed, so a control character there is not a fault of the
// daemon's. Each run of control characters becomes one space, and the
// ends are trimmed. daemon and protocol, which are not probe output, are
// left for validate to judge. A value it changes is replaced, not written
// through: what v's pointers and slice share with another Versions stays
// as it was.
func (v *Versions) Tidy() {
	for _, s := range []**string{&v.Runsc, &v.Docker, &v.Python, &v.Kernel, &v.Distro, &v.Arch} {
		if *s != nil {
			if t := oneLine(**s); t != **s {
				*s = &t
			}
		}
	}
	if c := v.CPU; c != nil && oneLine(c.Model) != c.Model {
		tidied := *c
		tidied.Model = oneLine(c.Model)
		v.CPU = &tidied
	}
	if slices.ContainsFunc(v.GPU, untidyGPU) {
		v.GPU = slices.Clone(v.GPU)
		for i := range v.GPU {
			g := &v.GPU[i]
			g.Name, g.Driver = oneLine(g.Name), oneLine(g.Driver)
			if g.CUDA != nil {
				cuda := oneLine(*g.CUDA)
				g.CUDA = &cuda
			}
		}
	}
}

func untidyGPU(g GPU) bool {
	return oneLine(g.Name) != g.Name || oneLine(g.Driver) != g.Driver || g.CUDA != nil && oneLine(*g.CUDA) != *g.CUDA
}

// FitText is the nearest text CheckText takes at maxBytes: invalid UTF-8
// becomes U+FFFD, each run of control characters one space, and the rest
// is cut to maxBytes on a character boundary. A sender that must not be
// refused (an ack carrying a child's own error type) sends this.
func FitText(s string, maxBytes int) string {
	if CheckText("", s, maxBytes) == nil {
		return s
	}
	s = oneLine(strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) > maxBytes {
		cut := maxBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// oneLine replaces each run of control characters in s with a space and
// trims the ends; s itself when it has none (no allocation).
func oneLine(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	gap := false
	for _, r := range s {
		if unicode.IsControl(r) {
			gap = true
			continue
		}
		if gap && b.Len() > 0 {
			b.WriteByte(' ')
		}
		gap = false
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}

func (v *Versions) validate() *ValidationError {
	for _, s := range []struct {
		field string
		value *string
	}{
		{"versions.daemon", v.Daemon}, {"versions.protocol", v.Protocol}, {"versions.runsc", v.Runsc},
		{"versions.docker", v.Docker}, {"versions.python", v.Python}, {"versions.kernel", v.Kernel},
		{"versions.distro", v.Distro}, {"versions.arch", v.Arch},
	} {
		if bad := checkOptText(s.field, s.value, MaxNameBytes); bad != nil {
			return bad
		}
	}
	if v.CPU != nil {
		if bad := CheckText("versions.cpu.model", v.CPU.Model, MaxNameBytes); bad != nil {
			return bad
		}
	}
	if len(v.GPU) > MaxGPUs {
		return invalid(InvalidTooMany, "versions.gpu", "%d entries; at most %d", len(v.GPU), MaxGPUs)
	}
	for i := range v.GPU {
		g := &v.GPU[i]
		for _, s := range []struct {
			field string
			value *string
		}{{"versions.gpu.name", &g.Name}, {"versions.gpu.driver", &g.Driver}, {"versions.gpu.cuda", g.CUDA}} {
			if bad := checkOptText(s.field, s.value, MaxNameBytes); bad != nil {
				bad.Message = fmt.Sprintf("%s (entry %d)", bad.Message, i)
				return bad
			}
		}
	}
	return nil
}

// Validate checks a poll against the limits above; nil when it fits.
func (p *PollRequest) Validate() *ValidationError {
	if v := CheckID("worker_id", p.WorkerID, MaxWorkerIDBytes); v != nil {
		return v
	}
	if v := CheckText("queue", p.Queue, MaxQueueBytes); v != nil {
		return v
	}
	for i := range p.Invocations {
		s := &p.Invocations[i]
		if v := CheckID("invocations.invocation_id", s.InvocationID, MaxIDBytes); v != nil {
			v.Message = fmt.Sprintf("%s (entry %d)", v.Message, i)
			return v
		}
		if v := CheckText("invocations.state", s.State, MaxNameBytes); v != nil {
			v.Message = fmt.Sprintf("%s (entry %d)", v.Message, i)
			return v
		}
	}
	if c := p.UpdatedCapabilities; c != nil {
		return c.validate("updated_capabilities")
	}
	return nil
}

// Validate checks an ack's ids and error type; nil when they fit. Its
// result blob and error text are bounded by the body limit alone: a
// result is never refused for being long, only for being malformed.
func (a *Ack) Validate() *ValidationError {
	if v := CheckID("invocation_id", a.InvocationID, MaxIDBytes); v != nil {
		return v
	}
	if a.WorkerID != "" {
		if v := CheckID("worker_id", a.WorkerID, MaxWorkerIDBytes); v != nil {
			return v
		}
	}
	if a.Error != nil {
		return CheckText("error.type", a.Error.TypeName, MaxNameBytes)
	}
	return nil
}
