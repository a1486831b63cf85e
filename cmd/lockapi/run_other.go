//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

// inTerminalForeground is false where process groups cannot be asked
// about: every signal is passed on.
func inTerminalForeground() bool { return false }
