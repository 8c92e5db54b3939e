//go:build race

package spool_test

// raceEnabled is true under -race, where encoding a 16 MiB body takes
// seconds; the default per-artifact case then runs only without -race.
const raceEnabled = true
