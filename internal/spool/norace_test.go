//go:build !race

package spool_test

const raceEnabled = false
