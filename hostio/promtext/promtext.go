// Package promtext writes the Prometheus text exposition format: a family's
// HELP and TYPE lines, then its samples, one per line.
//
// It decides only the format. Which figures exist, their names and their
// labels belong to the daemon's introspection and the relay's metrics.
package promtext

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// ContentType is the exposition format's media type, for the response
// that carries it.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Writer writes to W; write errors are the caller's connection's concern
// and are ignored, as a scraper that hung up wants nothing more.
type Writer struct{ W io.Writer }

// Family starts a family: typ is "counter", "gauge" or "histogram".
func (p Writer) Family(name, typ, help string) {
	fmt.Fprintf(p.W, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// Int writes one sample with an integer value; labels is empty or
// `k="v",…` (see Label).
func (p Writer) Int(name, labels string, v uint64) {
	fmt.Fprintf(p.W, "%s%s %d\n", name, braced(labels), v)
}

// Float writes one sample with a float value; NaN and ±Inf are written as
// 0, which every scraper parses.
func (p Writer) Float(name, labels string, v float64) {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		v = 0
	}
	fmt.Fprintf(p.W, "%s%s %s\n", name, braced(labels), strconv.FormatFloat(v, 'g', -1, 64))
}

// Counter writes a family of one unlabelled counter.
func (p Writer) Counter(name, help string, v uint64) {
	p.Family(name, "counter", help)
	p.Int(name, "", v)
}

// Gauge writes a family of one unlabelled gauge.
func (p Writer) Gauge(name, help string, v float64) {
	p.Family(name, "gauge", help)
	p.Float(name, "", v)
}

// ByLabel writes a family with one sample per key of values, labelled
// label=key, in key order (so a scrape reads the same order twice).
func (p Writer) ByLabel(name, typ, help, label string, values map[string]uint64) {
	p.Family(name, typ, help)
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p.Int(name, Label(label, k), values[k])
	}
}

// Label is one label pair, its value quoted.
func Label(key, value string) string { return key + "=" + strconv.Quote(value) }

func braced(labels string) string {
	if labels == "" {
		return ""
	}
	return "{" + labels + "}"
}
