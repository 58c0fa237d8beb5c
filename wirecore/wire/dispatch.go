package wire

import (
	"fmt"

	"github.com/tinylib/msgp/msgp"
)

// Directive is a poll command decoded by its kind: one of HibernateCommand,
// SetupCommand, ExecCommand, OTAUpdateCommand, ResetBackoffCommand,
// RotateKeyCommand, RunCommand, CancelCommand (an extension), or Unknown.
type Directive interface {
	// CommandID is the id of the poll command the directive came from.
	CommandID() string
	// CommandKind is the kind string as it arrived on the wire.
	CommandKind() string
}

// HibernateCommand is a decoded "hibernate".
type HibernateCommand struct {
	ID   string
	Body Hibernate
}

// SetupCommand is a decoded "setup".
type SetupCommand struct {
	ID   string
	Body Setup
}

// ExecCommand is a decoded "exec".
type ExecCommand struct {
	ID   string
	Body Exec
}

// OTAUpdateCommand is a decoded "ota_update".
type OTAUpdateCommand struct {
	ID   string
	Body OTAUpdate
}

// ResetBackoffCommand is a "reset_backoff"; it has no typed body.
type ResetBackoffCommand struct{ ID string }

// RotateKeyCommand is a "rotate_key"; it has no typed body.
type RotateKeyCommand struct{ ID string }

// RunCommand is a decoded "run".
type RunCommand struct {
	ID   string
	Body Run
}

// CancelCommand is a decoded "cancel" (extension ExtCancel).
type CancelCommand struct {
	ID   string
	Body Cancel
}

// Unknown is a command whose kind is not one of the seven, or whose body does
// not decode into its kind. It is logged and skipped, never fatal.
type Unknown struct {
	ID     string
	Kind   string
	Reason string
}

func (c HibernateCommand) CommandID() string    { return c.ID }
func (c SetupCommand) CommandID() string        { return c.ID }
func (c ExecCommand) CommandID() string         { return c.ID }
func (c OTAUpdateCommand) CommandID() string    { return c.ID }
func (c ResetBackoffCommand) CommandID() string { return c.ID }
func (c RotateKeyCommand) CommandID() string    { return c.ID }
func (c RunCommand) CommandID() string          { return c.ID }
func (c CancelCommand) CommandID() string       { return c.ID }
func (c Unknown) CommandID() string             { return c.ID }

func (HibernateCommand) CommandKind() string    { return KindHibernate }
func (SetupCommand) CommandKind() string        { return KindSetup }
func (ExecCommand) CommandKind() string         { return KindExec }
func (OTAUpdateCommand) CommandKind() string    { return KindOTAUpdate }
func (ResetBackoffCommand) CommandKind() string { return KindResetBackoff }
func (RotateKeyCommand) CommandKind() string    { return KindRotateKey }
func (RunCommand) CommandKind() string          { return KindRun }
func (CancelCommand) CommandKind() string       { return KindCancel }
func (c Unknown) CommandKind() string           { return c.Kind }

// Dispatch decodes a poll command's body according to its kind. It never
// fails: an unknown kind or a body that does not fit becomes Unknown.
func Dispatch(c Command) Directive {
	switch c.Kind {
	case KindResetBackoff:
		return ResetBackoffCommand{ID: c.ID}
	case KindRotateKey:
		return RotateKeyCommand{ID: c.ID}
	case KindHibernate:
		return decodeDirective(c, func(b Hibernate) Directive { return HibernateCommand{ID: c.ID, Body: b} })
	case KindSetup:
		return decodeDirective(c, func(b Setup) Directive { return SetupCommand{ID: c.ID, Body: b} })
	case KindExec:
		return decodeDirective(c, func(b Exec) Directive {
			return unlessEmpty(c, "exec_id", b.ExecID, ExecCommand{ID: c.ID, Body: b})
		})
	case KindOTAUpdate:
		return decodeDirective(c, func(b OTAUpdate) Directive { return OTAUpdateCommand{ID: c.ID, Body: b} })
	case KindRun:
		return decodeDirective(c, func(b Run) Directive {
			return unlessEmpty(c, "invocation_id", b.InvocationID, RunCommand{ID: c.ID, Body: b})
		})
	case KindCancel:
		return decodeDirective(c, func(b Cancel) Directive {
			if (b.InvocationID == "") == (b.ExecID == "") {
				return Unknown{ID: c.ID, Kind: c.Kind, Reason: "cancel body names neither or both of invocation_id and exec_id"}
			}
			return CancelCommand{ID: c.ID, Body: b}
		})
	}
	return Unknown{ID: c.ID, Kind: c.Kind, Reason: fmt.Sprintf("unknown command kind %q", c.Kind)}
}

// decodeDirective decodes c's body as a T and hands it to directive, which
// makes the kind's Directive (or an Unknown where the body lacks its id); a
// body that does not decode is the Unknown decodeInto reports.
func decodeDirective[T any, P interface {
	*T
	msgp.Unmarshaler
}](c Command, directive func(T) Directive) Directive {
	var body T
	if u, bad := decodeInto[T, P](c, &body); bad {
		return u
	}
	return directive(body)
}

// unlessEmpty is d, or an Unknown when the body's own id, its field named
// field, is empty: an exec or a run the daemon could not report on.
func unlessEmpty(c Command, field, id string, d Directive) Directive {
	if id == "" {
		return Unknown{ID: c.ID, Kind: c.Kind, Reason: c.Kind + " body has no " + field}
	}
	return d
}

// decodeInto decodes the whole body into dst; trailing bytes are an error.
//
// A body that does not decode is tried once more without its null-valued
// map entries: a control plane in Python or Rust writes an unset optional
// field (`sudo`, `run_config.image`, `env`, …) as nil, which means the same
// as leaving it out, while msgp's readers for string, bool and struct refuse
// nil. The retry costs nothing on the common path.
func decodeInto[T any, P interface {
	*T
	msgp.Unmarshaler
}](c Command, dst P) (Unknown, bool) {
	err := decodeAll(c.Body, dst)
	if err != nil {
		if stripped, changed, serr := withoutNilEntries(c.Body); serr == nil && changed {
			*dst = *new(T)
			if decodeAll(stripped, dst) == nil {
				return Unknown{}, false
			}
		}
		return Unknown{ID: c.ID, Kind: c.Kind, Reason: fmt.Sprintf("%s body does not decode: %v", c.Kind, err)}, true
	}
	return Unknown{}, false
}

func decodeAll(b []byte, dst msgp.Unmarshaler) error {
	rest, err := dst.UnmarshalMsg(b)
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d trailing bytes", len(rest))
	}
	return err
}

// maxNilStripDepth bounds the recursion of withoutNilEntries; command
// bodies nest a few levels, so a deeper body is left to fail as it is.
const maxNilStripDepth = 32

// withoutNilEntries copies one msgpack value, dropping every map entry
// whose value is nil, at any depth. changed reports whether any was dropped.
func withoutNilEntries(b []byte) (out []byte, changed bool, err error) {
	out, rest, changed, err := appendWithoutNils(make([]byte, 0, len(b)), b, 0)
	if err == nil && len(rest) != 0 {
		err = fmt.Errorf("%d trailing bytes", len(rest))
	}
	return out, changed, err
}

func appendWithoutNils(dst, b []byte, depth int) (out, rest []byte, changed bool, err error) {
	if depth > maxNilStripDepth {
		return dst, b, false, msgp.ErrRecursion
	}
	switch msgp.NextType(b) {
	case msgp.MapType:
		n, rest, err := msgp.ReadMapHeaderBytes(b)
		if err != nil {
			return dst, b, false, err
		}
		var entries []byte
		kept := uint32(0)
		for ; n > 0; n-- {
			start := rest
			if rest, err = msgp.Skip(rest); err != nil {
				return dst, b, false, err
			}
			key := start[:len(start)-len(rest)]
			if msgp.IsNil(rest) {
				rest, changed = rest[1:], true
				continue
			}
			entries = append(entries, key...)
			var sub bool
			if entries, rest, sub, err = appendWithoutNils(entries, rest, depth+1); err != nil {
				return dst, b, false, err
			}
			changed = changed || sub
			kept++
		}
		return append(msgp.AppendMapHeader(dst, kept), entries...), rest, changed, nil
	case msgp.ArrayType:
		n, rest, err := msgp.ReadArrayHeaderBytes(b)
		if err != nil {
			return dst, b, false, err
		}
		dst = msgp.AppendArrayHeader(dst, n)
		for ; n > 0; n-- {
			var sub bool
			if dst, rest, sub, err = appendWithoutNils(dst, rest, depth+1); err != nil {
				return dst, b, false, err
			}
			changed = changed || sub
		}
		return dst, rest, changed, nil
	}
	rest, err = msgp.Skip(b)
	if err != nil {
		return dst, b, false, err
	}
	return append(dst, b[:len(b)-len(rest)]...), rest, false, nil
}
