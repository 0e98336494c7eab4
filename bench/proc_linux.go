package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the child when the benchmark dies,
// so that no Caddy process is left holding its ports after a crash.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
