package daemon

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// seqRand replays fixed values: jitters for Float64, words for Uint64.
type seqRand struct {
	jitters []float64
	words   []uint64
}

func (r *seqRand) Float64() float64 {
	f := r.jitters[0]
	r.jitters = r.jitters[1:]
	return f
}

func (r *seqRand) Uint64() uint64 {
	w := r.words[0]
	r.words = r.words[1:]
	return w
}

func TestBackoffSchedule(t *testing.T) {
	type step struct {
		Wait time.Duration
		Base float64 // after the step
	}
	tests := []struct {
		name     string
		min, max float64
		jitters  []float64
		want     []step
	}{
		{
			name: "no jitter doubles to the cap",
			min:  1, max: 10,
			jitters: []float64{0, 0, 0, 0, 0, 0},
			want: []step{
				{1 * time.Second, 2}, {2 * time.Second, 4}, {4 * time.Second, 8},
				{8 * time.Second, 10}, {10 * time.Second, 10}, {10 * time.Second, 10},
			},
		},
		{
			// b + r·min(b, 5): the jitter span stops growing at 5 s while
			// the base keeps doubling.
			name: "full jitter is capped at five seconds",
			min:  2, max: 60,
			jitters: []float64{0.5, 0.5, 0.5, 0.5, 0.99},
			want: []step{
				{3 * time.Second, 4},           // 2 + 0.5·2
				{6 * time.Second, 8},           // 4 + 0.5·4
				{10500 * time.Millisecond, 16}, // 8 + 0.5·5
				{18500 * time.Millisecond, 32}, // 16 + 0.5·5
				{36950 * time.Millisecond, 60}, // 32 + 0.99·5
			},
		},
		{
			name: "sub-second minimum",
			min:  0.25, max: 1,
			jitters: []float64{1, 0.5, 0},
			want:    []step{{500 * time.Millisecond, 0.5}, {750 * time.Millisecond, 1}, {time.Second, 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackoff(tt.min, tt.max)
			var got []step
			for _, j := range tt.jitters {
				w := b.next(j)
				got = append(got, step{w, b.base})
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("schedule (-want +got):\n%s", d)
			}
			b.reset()
			if b.base != tt.min {
				t.Errorf("after reset base = %g, want %g", b.base, tt.min)
			}
		})
	}
}

func TestProvisionalWorkerID(t *testing.T) {
	at := time.Unix(1767225600, 0) // 2026-01-01T00:00:00Z
	words := []uint64{0x0123 << 48, 0x456789abcdef0123}
	tests := []struct {
		machineID, hostname, want string
	}{
		{"auto", "gpu-7", "gpu-7-01KDVDNA0004HMASW9NF6YY093"},
		{"", "gpu-7", "gpu-7-01KDVDNA0004HMASW9NF6YY093"},
		{"rack7-node3", "gpu-7", "rack7-node3-01KDVDNA0004HMASW9NF6YY093"},
	}
	for _, tt := range tests {
		got := provisionalWorkerID(tt.machineID, tt.hostname, at, &seqRand{words: words})
		if got != tt.want {
			t.Errorf("provisionalWorkerID(%q, %q) = %q, want %q", tt.machineID, tt.hostname, got, tt.want)
		}
	}
}

func TestULIDEncoding(t *testing.T) {
	tests := []struct {
		name   string
		at     time.Time
		r1, r2 uint64
		want   string
	}{
		// The time prefix of the ULID specification's own example.
		{"spec example time", time.UnixMilli(1469918176385), 1<<64 - 1, 1<<64 - 1, "01ARYZ6S41ZZZZZZZZZZZZZZZZ"},
		{"zero", time.UnixMilli(0), 0, 0, "00000000000000000000000000"},
		{"only the top 16 bits of the first word are used", time.UnixMilli(1e9), 0xffff, 0, "0000XSNJG00000000000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ulidString(tt.at, &seqRand{words: []uint64{tt.r1, tt.r2}})
			if got != tt.want {
				t.Errorf("ulidString = %q, want %q", got, tt.want)
			}
		})
	}
}
