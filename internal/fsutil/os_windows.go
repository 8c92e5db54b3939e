//go:build windows

package fsutil

// agentscm runs on Linux and macOS. This declaration fails the Windows
// build with a readable message instead of a page of missing system calls.
var _ = agentscm_is_not_supported_on_windows__use_Linux_or_macOS_or_WSL
