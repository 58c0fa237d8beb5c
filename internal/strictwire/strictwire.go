// Package strictwire decodes the bodies a control plane sends as a daemon
// written from the tables of docs/protocol.md would: into strictly typed
// structs, with a msgpack implementation other than the one nymph encodes with
// (vmihailenco/msgpack), and with no lenient hooks. A key the tables list
// without `?` must be present; only an `X | null` or `X?` key may be nil; an
// integer field refuses a float (even 86400.0) and a negative number; a string
// refuses a number; bytes must be bin. Unknown keys are allowed, as serde
// allows them by default.
//
// Where a table says only "number", the struct types the field as a careful
// Rust author would (u64 for a whole count of seconds): that is the
// reading nymph serve must satisfy. The structs are written from the
// tables, not from the wire package, so a field dropped or retyped there
// fails here.
//
// Only tests import this package.
package strictwire

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// HelloResponse is the hello response of docs/protocol.md ("HelloResponse").
type HelloResponse struct {
	WorkerID           *string        `msgpack:"worker_id"`
	SessionToken       *string        `msgpack:"session_token"`
	SessionTTLS        uint64         `msgpack:"session_ttl_s"`
	Config             map[string]any `msgpack:"config"`
	Cursor             *string        `msgpack:"cursor"`
	Reject             *Reject        `msgpack:"reject"`
	KeyID              *string        `msgpack:"key_id"`
	KeyRotationMaxAgeS uint64         `msgpack:"key_rotation_max_age_s"`
	// ServerTimeEpochS: "number | null, for clock-skew calibration".
	ServerTimeEpochS *int64 `msgpack:"server_time_epoch_s"`
}

// Reject is a hello refusal.
type Reject struct {
	Code    string `msgpack:"code"`
	Message string `msgpack:"message"`
}

// PollResponse is `{ commands: [ { id, kind, body }, … ], target_nymph_version }`.
type PollResponse struct {
	Commands           []Command `msgpack:"commands"`
	TargetNymphVersion *string   `msgpack:"target_nymph_version"`
}

// Command is one poll command; Body is decoded by kind (DecodeBody).
type Command struct {
	ID   string             `msgpack:"id"`
	Kind string             `msgpack:"kind"`
	Body msgpack.RawMessage `msgpack:"body"`
}

// Hibernate is `{ until_epoch_s }`.
type Hibernate struct {
	UntilEpochS uint64 `msgpack:"until_epoch_s"`
}

// Setup is `{ script, sudo?, refresh_capabilities?, name? }`.
type Setup struct {
	Script              string  `msgpack:"script"`
	Sudo                *bool   `msgpack:"sudo,omitempty"`
	RefreshCapabilities *bool   `msgpack:"refresh_capabilities,omitempty"`
	Name                *string `msgpack:"name,omitempty"`
}

// Exec is `{ exec_id, command, env, stdin, workdir?, timeout_s?, log?,
// payload_inline?, payload_ref? }`.
type Exec struct {
	ExecID        string            `msgpack:"exec_id"`
	Command       string            `msgpack:"command"`
	Env           map[string]string `msgpack:"env"`
	Stdin         string            `msgpack:"stdin"`
	Workdir       *string           `msgpack:"workdir,omitempty"`
	TimeoutS      *uint64           `msgpack:"timeout_s,omitempty"`
	Log           *LogSink          `msgpack:"log,omitempty"`
	PayloadInline []byte            `msgpack:"payload_inline,omitempty"`
	PayloadRef    *PayloadRef       `msgpack:"payload_ref,omitempty"`
}

// LogSink is `{ stdout_url, stdin_url?, control_url?, flush_ms, flush_bytes }`.
type LogSink struct {
	StdoutURL  string  `msgpack:"stdout_url"`
	StdinURL   *string `msgpack:"stdin_url,omitempty"`
	ControlURL *string `msgpack:"control_url,omitempty"`
	FlushMS    uint64  `msgpack:"flush_ms"`
	FlushBytes uint64  `msgpack:"flush_bytes"`
}

// PayloadRef is `{ bucket, key, size, content_type, sha256? }`.
type PayloadRef struct {
	Bucket      string  `msgpack:"bucket"`
	Key         string  `msgpack:"key"`
	Size        uint64  `msgpack:"size"`
	ContentType string  `msgpack:"content_type"`
	SHA256      *string `msgpack:"sha256,omitempty"`
}

// OTAUpdate is `{ version, url, sha256 }`.
type OTAUpdate struct {
	Version string `msgpack:"version"`
	URL     string `msgpack:"url"`
	SHA256  string `msgpack:"sha256"`
}

// Run is `{ invocation_id, function, run_config, args_blob,
// parent_invocation_id, root_invocation_id, script?, as_user? }`.
type Run struct {
	InvocationID       string    `msgpack:"invocation_id"`
	Function           Function  `msgpack:"function"`
	RunConfig          RunConfig `msgpack:"run_config"`
	ArgsBlob           []byte    `msgpack:"args_blob"`
	ParentInvocationID *string   `msgpack:"parent_invocation_id"`
	RootInvocationID   *string   `msgpack:"root_invocation_id"`
	Script             *string   `msgpack:"script,omitempty"`
	AsUser             *string   `msgpack:"as_user,omitempty"`
	// PayloadRef: spec 001, "Payload store": a run may carry its
	// arguments by reference instead of inline.
	PayloadRef *PayloadRef `msgpack:"payload_ref,omitempty"`
}

// Function names the code a run invokes (`function.module`, `function.qualname`).
type Function struct {
	Module   string `msgpack:"module"`
	Qualname string `msgpack:"qualname"`
}

// RunConfig: docs/protocol.md names only run_config.runner; the rest is the
// runner's, and is allowed through as unknown keys.
type RunConfig struct {
	Runner *string `msgpack:"runner,omitempty"`
}

// ErrorBody is the `{ error }` of a 4xx answer on a daemon route.
type ErrorBody struct {
	Error string `msgpack:"error"`
}

// ValidationError is the `{ error, field }` of a 422.
type ValidationError struct {
	Error string `msgpack:"error"`
	Field string `msgpack:"field"`
}

// PresignResponse is the presign reply `{ url, method, headers, expiresAt }`.
type PresignResponse struct {
	URL       string            `msgpack:"url"`
	Method    string            `msgpack:"method"`
	Headers   map[string]string `msgpack:"headers"`
	ExpiresAt int64             `msgpack:"expiresAt"`
}

// Decode decodes one whole msgpack value into dst (a pointer to one of the
// structs above), strictly: every key dst's type requires is checked
// present and of the right msgpack family first, then the value is decoded
// into dst so that anything the checks let through still has to fit.
func Decode(b []byte, dst any) error {
	dec := msgpack.NewDecoder(bytes.NewReader(b))
	generic, err := dec.DecodeInterface()
	if err != nil {
		return fmt.Errorf("strictwire: not msgpack: %w", err)
	}
	if _, err := dec.DecodeInterface(); err == nil {
		return fmt.Errorf("strictwire: trailing bytes after the value")
	}
	t := reflect.TypeOf(dst)
	if t.Kind() != reflect.Pointer {
		return fmt.Errorf("strictwire: Decode needs a pointer, got %T", dst)
	}
	if err := check(generic, t.Elem(), ""); err != nil {
		return err
	}
	if err := msgpack.Unmarshal(b, dst); err != nil {
		return fmt.Errorf("strictwire: into %T: %w", dst, err)
	}
	return nil
}

// BodyType returns a pointer to a zero struct for a command kind, or nil
// for the two kinds with no typed body (reset_backoff, rotate_key).
func BodyType(kind string) (any, error) {
	switch kind {
	case "hibernate":
		return &Hibernate{}, nil
	case "setup":
		return &Setup{}, nil
	case "exec":
		return &Exec{}, nil
	case "ota_update":
		return &OTAUpdate{}, nil
	case "run":
		return &Run{}, nil
	case "reset_backoff", "rotate_key":
		return nil, nil
	}
	return nil, fmt.Errorf("strictwire: kind %q is not one of protocol 1's seven", kind)
}

// DecodeBody decodes a command's body by its kind; nil for a kind with no
// typed body.
func DecodeBody(c Command) (any, error) {
	dst, err := BodyType(c.Kind)
	if err != nil || dst == nil {
		return nil, err
	}
	if err := Decode(c.Body, dst); err != nil {
		return nil, fmt.Errorf("%s body of command %s: %w", c.Kind, c.ID, err)
	}
	return dst, nil
}

// check walks a generically decoded value against the type a strict
// reader decodes it into.
func check(v any, t reflect.Type, path string) error {
	where := path
	if where == "" {
		where = "the body"
	}
	if t == reflect.TypeOf(msgpack.RawMessage{}) { // any value, kept raw
		return nil
	}
	if v == nil {
		if t.Kind() == reflect.Pointer || t.Kind() == reflect.Interface {
			return nil
		}
		return fmt.Errorf("strictwire: %s is nil, but its type %v is not nullable", where, t)
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Interface:
		return nil
	case reflect.String:
		if _, ok := v.(string); !ok {
			return fmt.Errorf("strictwire: %s is %T, want a str", where, v)
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("strictwire: %s is %T, want a bool", where, v)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if !isInteger(v) {
			return fmt.Errorf("strictwire: %s is %T (%v), want an integer", where, v, v)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if !isInteger(v) || reflect.ValueOf(v).CanInt() && reflect.ValueOf(v).Int() < 0 {
			return fmt.Errorf("strictwire: %s is %T (%v), want an unsigned integer", where, v, v)
		}
	case reflect.Float32, reflect.Float64:
		if !isInteger(v) && !isFloat(v) {
			return fmt.Errorf("strictwire: %s is %T, want a number", where, v)
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			if _, ok := v.([]byte); !ok {
				return fmt.Errorf("strictwire: %s is %T, want bin", where, v)
			}
			return nil
		}
		items, ok := v.([]any)
		if !ok {
			return fmt.Errorf("strictwire: %s is %T, want an array", where, v)
		}
		for i, item := range items {
			if err := check(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("strictwire: %s is %T, want a map with str keys", where, v)
		}
		for k, item := range m {
			if err := check(item, t.Elem(), join(path, k)); err != nil {
				return err
			}
		}
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("strictwire: %s is %T, want a map", where, v)
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
			item, present := m[name]
			if !present {
				if opts != "omitempty" {
					return fmt.Errorf("strictwire: required key %s is missing", join(path, name))
				}
				continue
			}
			if err := check(item, f.Type, join(path, name)); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("strictwire: %s: no rule for %v", where, t)
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func isInteger(v any) bool {
	switch v.(type) {
	case int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return true
	}
	return false
}

func isFloat(v any) bool {
	switch v.(type) {
	case float32, float64:
		return true
	}
	return false
}

// KeyRotationResponse is the answer of /v1/daemon/keys (docs/protocol.md,
// "Key rotation").
type KeyRotationResponse struct {
	KeyID  string  `msgpack:"key_id"`
	Reject *Reject `msgpack:"reject"`
}
