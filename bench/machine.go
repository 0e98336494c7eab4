package main

import (
	"bufio"
	"os"
	"runtime"
	"strings"
)

// machine describes where the figures were taken.
type machine struct {
	CPU    string
	Cores  int
	Go     string
	OS     string
	Kernel string
}

func describeMachine() machine {
	m := machine{
		CPU:   "unknown",
		Cores: runtime.NumCPU(),
		Go:    runtime.Version(),
		OS:    runtime.GOOS + "/" + runtime.GOARCH,
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}
