#!/bin/bash
# Eight concurrent shell loops of N runs of a command, each fed "{}" on
# stdin; prints runs per second (docs/performance.md, the hook-server
# section: start-up against fsyncref).
# usage: par.sh N cmd... ; 8 streams of N runs each, prints runs/s
n=$1; shift
t0=$(date +%s.%N)
for s in 1 2 3 4 5 6 7 8; do ( for i in $(seq $n); do echo '{}' | "$@" >/dev/null 2>&1; done ) & done; wait
t1=$(date +%s.%N)
echo "$* : $(echo "8*$n/($t1-$t0)" | bc -l | cut -c1-6)/s"
