//go:build !linux

package capsule

import "errors"

// listeningSocketsDiag is Linux only; listeningSockets falls back to /proc.
func listeningSocketsDiag() ([]listeningSocket, error) { return nil, errors.ErrUnsupported }
