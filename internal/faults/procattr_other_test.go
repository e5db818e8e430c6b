//go:build !linux

package faults_test

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
