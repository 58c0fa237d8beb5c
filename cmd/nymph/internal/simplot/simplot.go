// Package simplot draws the time series of `nymph sim` with gonum/plot,
// as SVG and PNG.
package simplot

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"time"

	"github.com/nymphd/nymph/wirecore/sim"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Series is one run to draw, under Label.
type Series struct {
	Label  string
	Result sim.Result
}

// palette gives each line a colour that prints and reads apart.
func palette(i int) color.Color {
	c := []color.RGBA{
		{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	return c[i%len(c)]
}

type line struct {
	label string
	pts   plotter.XYs
}

func draw(title, ylabel string, lines []line) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "virtual time (minutes)"
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	for i, l := range lines {
		if len(l.pts) == 0 {
			continue
		}
		ln, err := plotter.NewLine(l.pts)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", l.label, err)
		}
		ln.Color = palette(i)
		ln.Width = vg.Points(1.2)
		p.Add(ln)
		p.Legend.Add(l.label, ln)
	}
	return p, nil
}

func points(rows []sim.Row, y func(sim.Row) (float64, bool)) plotter.XYs {
	var pts plotter.XYs
	for _, r := range rows {
		if v, ok := y(r); ok {
			pts = append(pts, plotter.XY{X: r.T.Minutes(), Y: v})
		}
	}
	return pts
}

// Charts are the plots of one run, by file base name.
func Charts(s Series) (map[string]*plot.Plot, error) {
	rows := s.Result.Rows
	always := func(f func(sim.Row) float64) func(sim.Row) (float64, bool) {
		return func(r sim.Row) (float64, bool) { return f(r), true }
	}
	out := map[string]*plot.Plot{}
	var err error
	if out["requests"], err = draw(s.Label+": plane requests/s", "requests/s", []line{
		{"all routes", points(rows, always(sim.Row.Requests))},
		{"poll", points(rows, always(func(r sim.Row) float64 { return r.Poll }))},
		{"hello", points(rows, always(func(r sim.Row) float64 { return r.Hello }))},
		{"refused", points(rows, always(func(r sim.Row) float64 { return r.Refused }))},
	}); err != nil {
		return nil, err
	}
	if out["fleet"], err = draw(s.Label+": daemons and queue", "count", []line{
		{"parked polls", points(rows, always(func(r sim.Row) float64 { return float64(r.Parked) }))},
		{"in backoff", points(rows, always(func(r sim.Row) float64 { return float64(r.InBackoff) }))},
		{"queue depth", points(rows, always(func(r sim.Row) float64 { return float64(r.QueueDepth) }))},
		{"hibernating", points(rows, always(func(r sim.Row) float64 { return float64(r.Hibernating) }))},
	}); err != nil {
		return nil, err
	}
	ms := func(f func(sim.Row) float64) func(sim.Row) (float64, bool) {
		return func(r sim.Row) (float64, bool) { v := f(r); return v, v >= 0 }
	}
	if out["dispatch"], err = draw(s.Label+": dispatch latency (queued → started)", "milliseconds", []line{
		{"p50", points(rows, ms(func(r sim.Row) float64 { return durMS(r.DispatchP50) }))},
		{"p99", points(rows, ms(func(r sim.Row) float64 { return durMS(r.DispatchP99) }))},
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// durMS is d in milliseconds; a negative d (no sample) stays negative.
func durMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Compare draws the plane request rate of several runs on one chart.
func Compare(title string, runs []Series) (*plot.Plot, error) {
	var lines []line
	for _, s := range runs {
		lines = append(lines, line{fmt.Sprintf("%s (peak %.0f/s)", s.Label, s.Result.Summary.PeakRate), points(s.Result.Rows, func(r sim.Row) (float64, bool) { return r.Requests(), true })})
	}
	return draw(title, "plane requests/s", lines)
}

// Save writes p as dir/base.svg and dir/base.png.
func Save(p *plot.Plot, dir, base string) error {
	for _, ext := range []string{"svg", "png"} {
		wt, err := p.WriterTo(8*vg.Inch, 4*vg.Inch, ext)
		if err != nil {
			return fmt.Errorf("render %s.%s: %w", base, ext, err)
		}
		name := filepath.Join(dir, base+"."+ext)
		f, err := os.Create(name)
		if err != nil {
			return fmt.Errorf("save plot: %w", err)
		}
		_, err = wt.WriteTo(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("save plot %s: %w", name, err)
		}
	}
	return nil
}
