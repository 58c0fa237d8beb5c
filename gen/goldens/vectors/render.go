package vectors

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
)

// The expected field maps are stored as JSON that keeps msgpack's types:
// a JSON string is a msgpack str, a JSON integer a msgpack int, and the two
// types JSON cannot tell apart from those are tagged objects.
const (
	floatTag = "$float64" // {"$float64": 20} is the msgpack float64 20.0
	binTag   = "$bin"     // {"$bin": "c0ff"} is msgpack bin with those bytes
)

// Render returns the content of every golden file, by file name: for each
// vector, <name>.msgpack (our encoding) and <name>.json (its field map).
func Render() (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, v := range All() {
		b, err := v.Value.MarshalMsg(nil)
		if err != nil {
			return nil, fmt.Errorf("vectors: encode %s: %w", v.Name, err)
		}
		files[v.Name+".msgpack"] = b
		j, err := FieldsJSON(v.Fields)
		if err != nil {
			return nil, fmt.Errorf("vectors: render %s: %w", v.Name, err)
		}
		files[v.Name+".json"] = j
	}
	return files, nil
}

// Names returns the golden file names Render produces, sorted.
func Names() []string {
	var names []string
	for _, v := range All() {
		names = append(names, v.Name+".json", v.Name+".msgpack")
	}
	sort.Strings(names)
	return names
}

// Plain converts an expected field map into the canonical generic form a
// msgpack decoder yields: map[string]any, []any, string, int64 (uint64 above
// MaxInt64), float64, []byte, bool, nil.
func Plain(v any) any {
	switch x := v.(type) {
	case M:
		return plainMap(x)
	case Verbatim:
		return plainMap(x)
	case map[string]any:
		return plainMap(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = Plain(e)
		}
		return out
	case int:
		return int64(x)
	}
	return v
}

func plainMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, e := range m {
		out[k] = Plain(e)
	}
	return out
}

// FieldsJSON renders a field map as tagged JSON, keys sorted, indented.
func FieldsJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(tagged(Plain(v))); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func tagged(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = tagged(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = tagged(e)
		}
		return out
	case float64:
		return map[string]any{floatTag: x}
	case []byte:
		return map[string]any{binTag: hex.EncodeToString(x)}
	}
	return v
}

// ParseFieldsJSON reads tagged JSON back into the canonical form of Plain.
func ParseFieldsJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("vectors: parse field map: %w", err)
	}
	return untagged(v)
}

func untagged(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		return x.Int64()
	case []any:
		for i, e := range x {
			u, err := untagged(e)
			if err != nil {
				return nil, err
			}
			x[i] = u
		}
		return x, nil
	case map[string]any:
		if len(x) == 1 {
			if f, ok := x[floatTag].(json.Number); ok {
				return f.Float64()
			}
			if h, ok := x[binTag].(string); ok {
				return hex.DecodeString(h)
			}
		}
		for k, e := range x {
			u, err := untagged(e)
			if err != nil {
				return nil, err
			}
			x[k] = u
		}
		return x, nil
	}
	return v, nil
}
