package main

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and parentheses, as a process may have.
	line := []byte("4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 125 0 0 20 0 7 0 3 0 0\n")
	got, err := parseStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 375 * time.Second / userHZ; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("a short line parsed")
	}
}

func TestProcessCPUTimeOfSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if _, err := processCPUTime(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if _, err := machineBusy(); err != nil {
		t.Fatal(err)
	}
}
