package main

import (
	"fmt"
	"os"
	"time"
)

// benchEnv is what every part shares: the Caddy binary, a scratch
// directory, and the progress log.
type benchEnv struct {
	caddy string
	dir   string
	start time.Time
}

// logf prints a progress line, stamped with the time since the start.
func (e *benchEnv) logf(format string, args ...any) {
	fmt.Fprintf(os.Stdout, "[%6.1fs] %s\n", time.Since(e.start).Seconds(), fmt.Sprintf(format, args...))
}
