package attribution

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkBlame: a file of a 2,000-file checkout (4 MB) changed by 100
// of 200 tool calls, blamed from its history (each iteration opens the
// changelog afresh, as the command does).
func BenchmarkBlame(b *testing.B) {
	files := map[string]string{}
	for i := 0; i < 2000; i++ {
		files[fmt.Sprintf("d%02d/f%04d.txt", i%40, i)] = strings.Repeat(fmt.Sprintf("line %d of a file\n", i), 110)
	}
	r := newTestRepo(b, files)
	lines := []string{"head"}
	for i := 0; i < 200; i++ {
		if i%2 == 0 {
			lines = append(lines, fmt.Sprintf("call %d", i))
			r.write("hot.txt", strings.Join(lines, "\n")+"\n")
		} else {
			r.write(fmt.Sprintf("other%d.txt", i), "x\n")
		}
		r.call("Edit")
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		repo, err := Open(r.log)
		if err != nil {
			b.Fatal(err)
		}
		fb, err := repo.Blame(context.Background(), "hot.txt", -1)
		if err != nil || len(fb.Lines) != 101 {
			b.Fatalf("%v %d", err, len(fb.Lines))
		}
	}
}
