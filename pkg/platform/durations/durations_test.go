package durations

import (
	"slices"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  time.Duration
		want []time.Duration // nil: refused
	}{
		{"1m,5m, 30m", 0, []time.Duration{time.Minute, 5 * time.Minute, 30 * time.Minute}},
		{"90s", time.Hour, []time.Duration{90 * time.Second}},
		{"2h", time.Hour, nil},
		{"", 0, nil},
		{"1s,,2s", 0, nil},
		{"0s", 0, nil},
		{"-1s", 0, nil},
		{"soon", 0, nil},
	} {
		got, err := Parse(tc.in, tc.max)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%q (max %s): accepted as %v", tc.in, tc.max, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := Parse(Join(got), tc.max); err != nil || !slices.Equal(back, got) {
			t.Errorf("%q: Join then Parse gave %v, %v", tc.in, back, err)
		}
	}
}
