package daemonconfig

import (
	"fmt"
	"math"
	"sort"
)

// decoder walks the generic TOML document into Config by hand, because the
// file's rules are looser than a struct decoder's: numbers may be int or
// float, tags may be an array or a table, and unknown keys are warnings.
// The first type error stops the walk.
type decoder struct {
	path    string
	unknown []string
	err     error
}

// field decodes one known key's value.
type field func(d *decoder, key string, v any)

func (d *decoder) document(doc map[string]any, c *Config) {
	sections := map[string]map[string]field{
		"server": {
			"url":               str(&c.Server.URL),
			"token_file":        str(&c.Server.TokenFile),
			"ca_file":           str(&c.Server.CAFile),
			"namespace":         str(&c.Server.Namespace),
			"transport":         str(&c.Server.Transport),
			"relay_dir":         str(&c.Server.RelayDir),
			"relay_replies":     str(&c.Server.RelayReplies),
			"spool_interval_ms": integer(&c.Server.SpoolIntervalMS),
			"extensions":        boolean(&c.Server.Extensions),
		},
		"daemon": {
			"machine_id": str(&c.Daemon.MachineID),
			"label":      str(&c.Daemon.Label),
			"tags":       tags(&c.Daemon.Tags),
			"lanes":      strList(&c.Daemon.Lanes),
			"queue":      str(&c.Daemon.Queue),
		},
		"runtime": {
			"max_invocations":              integer(&c.Runtime.MaxInvocations),
			"keep_alive_s":                 number(&c.Runtime.KeepAliveS),
			"workdir":                      str(&c.Runtime.Workdir),
			"runners":                      strList(&c.Runtime.Runners),
			"default_runner":               str(&c.Runtime.DefaultRunner),
			"entry":                        strList(&c.Runtime.Entry),
			"container_entry":              strList(&c.Runtime.ContainerEntry),
			"auto_update":                  boolean(&c.Runtime.AutoUpdate),
			"auto_update_check_interval_s": number(&c.Runtime.AutoUpdateCheckIntervalS),
		},
		"poll": {
			"wait_max_s":  number(&c.Poll.WaitMaxS),
			"retry_min_s": number(&c.Poll.RetryMinS),
			"retry_max_s": number(&c.Poll.RetryMaxS),
		},
		"shutdown":   {"grace_s": number(&c.Shutdown.GraceS)},
		"introspect": {"enabled": boolean(&c.Introspect.Enabled), "listen": str(&c.Introspect.Listen)},
		"identity":   {"enabled": boolean(&c.Identity.Enabled), "key_file": str(&c.Identity.KeyFile)},
		"mounts":     {"cache_dir": str(&c.Mounts.CacheDir), "cache_max_bytes": integer64(&c.Mounts.CacheMaxBytes)},
		"log":        {"format": str(&c.Log.Format), "level": str(&c.Log.Level)},
	}
	for _, name := range sortedKeys(doc) {
		fields, ok := sections[name]
		if !ok {
			d.unknown = append(d.unknown, name)
			continue
		}
		table, ok := doc[name].(map[string]any)
		if !ok {
			d.typeError(name, "a table", doc[name])
			return
		}
		for _, key := range sortedKeys(table) {
			dotted := name + "." + key
			f, ok := fields[key]
			if !ok {
				d.unknown = append(d.unknown, dotted)
				continue
			}
			f(d, dotted, table[key])
			if d.err != nil {
				return
			}
		}
	}
}

func (d *decoder) typeError(key, want string, got any) {
	if d.err == nil {
		d.err = fmt.Errorf("daemonconfig: %s: %s must be %s, not %s", d.path, key, want, describe(got))
	}
}

func describe(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case int64, float64:
		return fmt.Sprintf("the number %v", v)
	case bool:
		return fmt.Sprintf("the boolean %v", v)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", v)
}

func str(dst *string) field {
	return func(d *decoder, key string, v any) {
		s, ok := v.(string)
		if !ok {
			d.typeError(key, "a string", v)
			return
		}
		*dst = s
	}
}

func boolean(dst *bool) field {
	return func(d *decoder, key string, v any) {
		b, ok := v.(bool)
		if !ok {
			d.typeError(key, "a boolean", v)
			return
		}
		*dst = b
	}
}

func number(dst *float64) field {
	return func(d *decoder, key string, v any) {
		switch n := v.(type) {
		case int64:
			*dst = float64(n)
		case float64:
			*dst = n
		default:
			d.typeError(key, "a number", v)
		}
	}
}

// integer accepts a float with no fractional part (a peer tool may write
// 100.0 for 100).
func integer(dst *int) field {
	return func(d *decoder, key string, v any) {
		switch n := v.(type) {
		case int64:
			*dst = int(n)
		case float64:
			if n != math.Trunc(n) || math.IsInf(n, 0) || math.IsNaN(n) {
				d.typeError(key, "a whole number", v)
				return
			}
			*dst = int(n)
		default:
			d.typeError(key, "a whole number", v)
		}
	}
}

func integer64(dst *int64) field {
	return func(d *decoder, key string, v any) {
		var n int
		integer(&n)(d, key, v)
		*dst = int64(n)
	}
}

func strList(dst *[]string) field {
	return func(d *decoder, key string, v any) {
		arr, ok := v.([]any)
		if !ok {
			d.typeError(key, "an array of strings", v)
			return
		}
		out := make([]string, 0, len(arr))
		for i, e := range arr {
			s, ok := e.(string)
			if !ok {
				d.typeError(fmt.Sprintf("%s[%d]", key, i), "a string", e)
				return
			}
			out = append(out, s)
		}
		*dst = out
	}
}

// tags accepts ["k=v", …] or a table {k = "v"}; a table's values may be
// numbers or booleans, rendered as text, and its keys come out sorted so
// the hello is stable.
func tags(dst *[]string) field {
	list := strList(dst)
	return func(d *decoder, key string, v any) {
		table, ok := v.(map[string]any)
		if !ok {
			if _, isArr := v.([]any); !isArr {
				d.typeError(key, `an array of "k=v" strings or a table`, v)
				return
			}
			list(d, key, v)
			return
		}
		out := make([]string, 0, len(table))
		for _, k := range sortedKeys(table) {
			switch val := table[k].(type) {
			case string, int64, float64, bool:
				out = append(out, fmt.Sprintf("%s=%v", k, val))
			default:
				d.typeError(key+"."+k, "a string", val)
				return
			}
		}
		*dst = out
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
