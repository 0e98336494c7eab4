package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// userHZ is the unit of CPU times in /proc/<pid>/stat. The kernel exports
// them in USER_HZ, which is 100 on every Linux architecture Go supports.
const userHZ = 100

// errNoProc means /proc is not there to read CPU times from.
var errNoProc = errors.New("no /proc: CPU times need Linux")

// processCPUTime returns utime+stime of a process from /proc/<pid>/stat:
// the CPU time of all its threads, also those that have exited.
func processCPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat("/proc/self/stat"); err != nil {
			return 0, errNoProc
		}
	}
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b)
}

// parseStatCPU reads fields 14 (utime) and 15 (stime) of a stat line. The
// command name (field 2) is in parentheses and may hold spaces or
// parentheses itself, so fields are counted from the last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat: no command name in %q", stat)
	}
	fields := bytes.Fields(stat[i+1:])
	// fields[0] is field 3 (state), so field n is fields[n-3].
	if len(fields) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name", len(fields))
	}
	var ticks int64
	for _, f := range fields[14-3 : 15-3+1] {
		n, err := strconv.ParseInt(string(f), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat: %v", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// machineBusy returns the CPU time all processes of the machine have used
// (user, nice, system) plus the time the hypervisor took away (steal),
// from the first line of /proc/stat. Interrupt time is left out: the
// loopback traffic of the benchmark itself is handled there.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, errNoProc
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	fields := bytes.Fields(line)
	if len(fields) < 9 || string(fields[0]) != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks int64
	// user nice system idle iowait irq softirq steal
	for _, i := range []int{1, 2, 3, 8} {
		n, err := strconv.ParseInt(string(fields[i]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %v", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// cpuMeter reads the CPU time of a measured process, of every process
// of the benchmark (itself and its Caddy processes), and of the machine.
type cpuMeter struct {
	target int   // the measured process
	ours   []int // every process of the benchmark but this one
}

// cpuSample is one reading of a cpuMeter.
type cpuSample struct {
	target, ours, machine time.Duration
}

// read takes a sample.
func (m cpuMeter) read() (cpuSample, error) {
	var s cpuSample
	var err error
	if s.target, err = processCPUTime(m.target); err != nil {
		return s, err
	}
	s.ours, err = processCPUTime(os.Getpid())
	if err != nil {
		return s, err
	}
	for _, pid := range m.ours {
		t, err := processCPUTime(pid)
		if err != nil {
			return s, err
		}
		s.ours += t
	}
	s.machine, err = machineBusy()
	return s, err
}
