// Command changeloghub measures the whole changelog hook process (one tool
// call: capture and, with a connection, upload) on a small git checkout in
// three setups run side by side: no connection (the reference), the
// embedded Hub, and a Hub served on loopback.
//
//	go run ./bench/changeloghub [-n 40] [-files 200]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	n := flag.Int("n", 40, "hook runs per setup")
	files := flag.Int("files", 200, "files in each checkout")
	flag.Parse()
	if err := run(*n, *files); err != nil {
		fmt.Fprintln(os.Stderr, "changeloghub:", err)
		os.Exit(1)
	}
}

func sh(env []string, dir string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env, cmd.Dir = env, dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %v: %v: %s", name, args, err, errb.String())
	}
	return out.String(), nil
}

func run(n, nfiles int) error {
	base, err := os.MkdirTemp("", "changeloghub-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(base)
	bin := filepath.Join(base, "agentscm")
	if _, err := sh(os.Environ(), "", "go", "build", "-o", bin, "./cmd/agentscm"); err != nil {
		return err
	}
	env := append(os.Environ(), "HOME="+filepath.Join(base, "home"), "XDG_CONFIG_HOME="+filepath.Join(base, "config"))
	data := filepath.Join(base, "hubdata")
	tok := filepath.Join(base, "tok")
	for _, args := range [][]string{
		{"hub", "admin", "human", "create", "--data", data, "--name", "alice"},
		{"hub", "admin", "repository", "create", "--data", data, "--name", "proj"},
		{"hub", "admin", "token", "create", "--data", data, "--human", "alice", "--repository", "proj", "--output", tok},
	} {
		if _, err := sh(env, "", bin, args...); err != nil {
			return err
		}
	}
	srv := exec.Command(bin, "hub", "serve", "--listen", "127.0.0.1:0", "--data", data)
	srv.Env = env
	out, _ := srv.StdoutPipe()
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { srv.Process.Signal(syscall.SIGTERM); srv.Wait() }()
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		return fmt.Errorf("hub serve did not start")
	}
	url := strings.TrimPrefix(sc.Text(), "listening on ")
	go func() {
		for sc.Scan() {
		}
	}()

	setups := []struct {
		name  string
		setup [][]string
	}{
		{"no connection (reference)", nil},
		{"embedded Hub", [][]string{{"client", "setup", "--root", "ROOT", "--local", "--repository", "proj"}, {"work", "start", "--root", "ROOT"}}},
		{"served Hub (loopback)", [][]string{{"client", "setup", "--root", "ROOT", "--hub", url, "--repository", "proj", "--token-file", tok}, {"work", "start", "--root", "ROOT"}}},
	}
	roots := make([]string, len(setups))
	for i, s := range setups {
		root := filepath.Join(base, fmt.Sprintf("repo%d", i))
		os.MkdirAll(filepath.Join(root, "src"), 0o755)
		if _, err := sh(env, root, "git", "init", "-q"); err != nil {
			return err
		}
		for f := 0; f < nfiles; f++ {
			os.WriteFile(filepath.Join(root, "src", fmt.Sprintf("f%04d.txt", f)), []byte(strings.Repeat("x", 100+f)), 0o644)
		}
		for _, args := range s.setup {
			for j := range args {
				args[j] = strings.ReplaceAll(args[j], "ROOT", root)
			}
			if _, err := sh(env, "", bin, args...); err != nil {
				return err
			}
		}
		if _, err := sh(env, "", bin, "changelog", "enable", "--root", root); err != nil {
			return err
		}
		roots[i] = root
	}
	times := make([][]time.Duration, len(setups))
	// Interleave the setups so that load on the machine hits them alike;
	// run 0 of each is the full first capture and is left out.
	for k := 0; k <= n; k++ {
		for i, root := range roots {
			os.WriteFile(filepath.Join(root, "src", fmt.Sprintf("new%04d.txt", k)), []byte(fmt.Sprint("call ", k)), 0o644)
			payload := fmt.Sprintf(`{"session_id":"bench-%d","cwd":%q,"hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_%d"}`, i, root, k)
			cmd := exec.Command(bin, "changelog", "hook-claude")
			cmd.Env, cmd.Stdin = env, strings.NewReader(payload)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			start := time.Now()
			if err := cmd.Run(); err != nil {
				return err
			}
			d := time.Since(start)
			if errb.Len() > 0 {
				return fmt.Errorf("%s: hook warned: %s", setups[i].name, errb.String())
			}
			if k > 0 {
				times[i] = append(times[i], d)
			}
		}
	}
	ref := median(times[0])
	fmt.Printf("changelog hook, whole process, %d files, %d runs each (run 0 left out)\n", nfiles, n)
	for i, s := range setups {
		ts := times[i]
		sort.Slice(ts, func(a, b int) bool { return ts[a] < ts[b] })
		fmt.Printf("%-28s p50 %6.1f ms  p90 %6.1f ms  max %6.1f ms  p50 ratio to reference %.2f\n", s.name,
			ms(median(ts)), ms(ts[len(ts)*9/10]), ms(ts[len(ts)-1]), float64(median(ts))/float64(ref))
	}
	// Every increment reached the Hub in the connected setups.
	for i := 1; i < len(setups); i++ {
		out, err := sh(env, "", bin, "changelog", "list", "--root", roots[i], "--from-hub", "--format", "json")
		if err != nil {
			return err
		}
		if c := strings.Count(out, `"position"`); c != n+1 {
			return fmt.Errorf("%s: the Hub holds %d increments, want %d", setups[i].name, c, n+1)
		}
	}
	return nil
}

func median(ts []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ts...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
