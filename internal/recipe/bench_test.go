package recipe_test

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// BenchmarkRunRecipe: one managed run of /usr/bin/true as the runner does
// it in-process (checkout lock, intake admission, Hub resolution on the
// embedded Hub, marker selection, durable attempt, durable start, spawn,
// durable finish, run receipt, attempt removal), without the hooks.
// BenchmarkExecTrue is the reference measured in the same run.
func BenchmarkRunRecipe(b *testing.B) {
	f := newFixture(b, recipeDef{"true", []string{"/usr/bin/true"}, 30, 1024})
	for b.Loop() {
		b.StopTimer()
		f.pre(f.command("true"))
		b.StartTimer()
		if _, err, _, _ := f.run("true", nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/usr/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteNewRef is one durable small-file write (fsync + directory
// fsync), the unit the runner's durability costs are made of.
func BenchmarkWriteNewRef(b *testing.B) {
	dir := b.TempDir()
	i := 0
	for b.Loop() {
		i++
		if err := fsutil.WriteNew(filepath.Join(dir, strconv.Itoa(i)), []byte("{}"), 0o600); err != nil {
			b.Fatal(err)
		}
	}
}
