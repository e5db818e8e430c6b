// Package fencing is a placeholder being written.
package fencing
