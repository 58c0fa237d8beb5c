package promtext

import (
	"math"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	var b strings.Builder
	p := Writer{W: &b}
	p.Counter("x_total", "Xs seen.", 3)
	p.Gauge("y", "A level.", 1.5)
	p.Gauge("z", "Not a number.", math.NaN())
	p.Family("e_total", "counter", "Errors by kind.")
	p.Int("e_total", Label("kind", `a"b`), 2)
	p.Float("h_bucket", Label("le", "+Inf"), 4)
	want := `# HELP x_total Xs seen.
# TYPE x_total counter
x_total 3
# HELP y A level.
# TYPE y gauge
y 1.5
# HELP z Not a number.
# TYPE z gauge
z 0
# HELP e_total Errors by kind.
# TYPE e_total counter
e_total{kind="a\"b"} 2
h_bucket{le="+Inf"} 4
`
	if got := b.String(); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}
