package ulid

import (
	"testing"
	"time"
)

func TestString(t *testing.T) {
	tests := []struct {
		at      time.Time
		entropy [10]byte
		want    string
	}{
		// The time prefix of the ULID specification's example.
		{time.UnixMilli(1469918176385), [10]byte{}, "01ARYZ6S410000000000000000"},
		{time.UnixMilli(0), [10]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "0000000000ZZZZZZZZZZZZZZZZ"},
		{time.UnixMilli(-5), [10]byte{9: 1}, "00000000000000000000000001"},
		{time.UnixMilli(1<<48 - 1), [10]byte{}, "7ZZZZZZZZZ0000000000000000"},
	}
	for _, tt := range tests {
		if got := String(tt.at, tt.entropy); got != tt.want {
			t.Errorf("String(%v, %x) = %q, want %q", tt.at.UnixMilli(), tt.entropy, got, tt.want)
		}
	}
}
