// Command clistart measures whole-process start-up of two builds side by
// side (issue 19: the parser change must not cost agentscm-hook its start-up):
// it runs agentscm-hook with a prompt payload for an unbound directory,
// `agentscm change-capture status` and `agentscm --help` from each build,
// interleaved round by round so machine load hits both alike, and prints the
// median and p90 of each with the ratio new/base.
//
//	go run ./bench/clistart -base /tmp/base/bin -new /tmp/new/bin [-runs 150]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"
)

func main() {
	base := flag.String("base", "", "directory holding the reference build's agentscm and agentscm-hook")
	next := flag.String("new", "", "directory holding the build under test")
	runs := flag.Int("runs", 150, "rounds")
	flag.Parse()
	if *base == "" || *next == "" {
		fmt.Fprintln(os.Stderr, "usage: clistart -base DIR -new DIR [-runs N]")
		os.Exit(2)
	}
	tmp, err := os.MkdirTemp("", "clistart-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(tmp)
	env := append(os.Environ(), "HOME="+tmp, "XDG_CONFIG_HOME="+filepath.Join(tmp, "cfg"))
	payload := []byte(fmt.Sprintf(`{"session_id":"s1","cwd":%q,"hook_event_name":"UserPromptSubmit","prompt":"p"}`, tmp))
	type tcase struct {
		name  string
		argv  []string
		stdin []byte
	}
	cases := []tcase{
		{"agentscm-hook (prompt, unbound dir)", []string{"agentscm-hook"}, payload},
		{"agentscm change-capture status", []string{"agentscm", "change-capture", "status"}, nil},
		{"agentscm --help", []string{"agentscm", "--help"}, nil},
	}
	times := map[string][]float64{}
	for r := 0; r < *runs; r++ {
		for _, c := range cases {
			for _, build := range []string{*base, *next} {
				cmd := exec.Command(filepath.Join(build, c.argv[0]), c.argv[1:]...)
				cmd.Env, cmd.Dir, cmd.Stdin = env, tmp, bytes.NewReader(c.stdin)
				t := time.Now()
				_ = cmd.Run() // --help and status exit 0; the hook always does
				times[build+"\x00"+c.name] = append(times[build+"\x00"+c.name], float64(time.Since(t).Microseconds())/1000)
			}
		}
	}
	q := func(v []float64, p float64) float64 {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		return s[int(float64(len(s)-1)*p)]
	}
	fmt.Printf("%-38s %12s %12s %7s   (p90 base / new; %d interleaved runs)\n", "process", "base median", "new median", "ratio", *runs)
	for _, c := range cases {
		b, n := times[*base+"\x00"+c.name], times[*next+"\x00"+c.name]
		fmt.Printf("%-38s %9.2f ms %9.2f ms %7.2f   (%.2f / %.2f ms)\n", c.name, q(b, .5), q(n, .5), q(n, .5)/q(b, .5), q(b, .9), q(n, .9))
	}
}
