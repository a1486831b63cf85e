//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"os"
	"syscall"
	"unsafe"
)

// inTerminalForeground reports whether this process belongs to the
// foreground process group of the terminal on stdin. A SIGINT then came
// from the terminal (Ctrl-C), which sent it to the whole group, the
// command included.
func inTerminalForeground() bool {
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, os.Stdin.Fd(), uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp)))
	return errno == 0 && int(pgrp) == syscall.Getpgrp()
}
