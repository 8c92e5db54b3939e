package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/agentscm/agentscm/internal/capsule"
)

func main() {
	root := os.Args[1]
	o := capsule.RunOptions{Root: root, Argv: []string{"sh", "-c", "echo $$ >> d000/e00/f00.txt"}, Env: os.Environ(), KeyDir: "/tmp/adb/w/config"}
	f, _ := os.Create("/tmp/adb/cpu.prof")
	pprof.StartCPUProfile(f)
	for range 5 {
		var r0, r1 runtime.MemStats
		runtime.ReadMemStats(&r0)
		t := time.Now()
		_, dir, err := capsule.Run(context.Background(), o)
		runtime.ReadMemStats(&r1)
		fmt.Println(time.Since(t), err, dir, "alloc MB", (r1.TotalAlloc-r0.TotalAlloc)>>20, "sys MB", r1.Sys>>20)
	}
	pprof.StopCPUProfile()
}
