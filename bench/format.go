package main

import (
	"fmt"
	"time"
)

// ms formats a duration in milliseconds, with precision to match.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f ms", v)
	}
}

// us formats a duration in microseconds.
func us(d time.Duration) string {
	v := float64(d) / float64(time.Microsecond)
	if v >= 100 {
		return fmt.Sprintf("%.0f µs", v)
	}
	return fmt.Sprintf("%.1f µs", v)
}

// ratio formats a ratio to a baseline.
func ratio(x float64) string { return fmt.Sprintf("%.3f×", x) }

// pct formats a fraction as a percentage.
func pct(x float64) string { return fmt.Sprintf("%.1f %%", 100*x) }
