package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel stop the bare front when lockbench dies
// without stopping it (killed, or crashed).
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
