//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing outside Linux: a bare front outlives a
// lockbench that is killed.
func dieWithParent(*exec.Cmd) {}
