package transcript

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// realisticTranscript writes a Claude Code 2.1.x-shaped transcript of about
// size bytes: per turn a user prompt, a large attachment record (rendered
// context, ~24 KiB), assistant records (one per content block, each
// repeating usage), tool results of a few KiB and bookkeeping records.
func realisticTranscript(tb testing.TB, size int) (string, int) {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "projects")
	os.MkdirAll(dir, 0o700)
	var b bytes.Buffer
	attachment := fmt.Sprintf(`{"parentUuid":"p","isSidechain":false,"attachment":{"type":"prompt_snapshot","systemPrompt":[%q]},"type":"attachment","uuid":"u","timestamp":"2026-11-29T21:15:49.595Z","sessionId":%q,"version":"2.1.328"}`+"\n",
		strings.Repeat("You are an agent working with the user toward their goals. ", 400), sess)
	msgs := 0
	for turn := 0; b.Len() < size; turn++ {
		b.WriteString(userLine(sess, fmt.Sprintf("prompt %d: please change the code", turn)))
		b.WriteString(attachment)
		for step := 0; step < 4; step++ {
			id := fmt.Sprintf("msg_%06d_%d", turn, step)
			msgs++
			b.WriteString(assistantLine(sess, id, textBlock("I will run the tests and then edit the file."), 12000+step, 300))
			b.WriteString(assistantLine(sess, id, `{"type":"tool_use","id":"toolu_`+id+`","name":"Bash","input":{"command":"go test ./...","description":"run tests"}}`, 12000+step, 300))
			b.WriteString(toolResultLine(sess, "toolu_"+id, strings.Repeat("ok  \tgithub.com/example/pkg\t0.123s\n", 80), false))
			b.WriteString(`{"type":"last-prompt","lastPrompt":"prompt","sessionId":"` + sess + `"}` + "\n")
		}
	}
	p := filepath.Join(dir, sess+".jsonl")
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		tb.Fatal(err)
	}
	return dir, msgs
}

// BenchmarkReadWhole reads a 5 MB transcript from its start in as many
// bounded invocations as MaxReadBytes needs (two): the worst case of a
// session observed from startup whose transcript grew to 5 MB between two
// hooks.
func BenchmarkReadWhole(b *testing.B) {
	root, msgs := realisticTranscript(b, 5<<20)
	st, _ := os.Stat(filepath.Join(root, sess+".jsonl"))
	b.SetBytes(st.Size())
	b.ResetTimer()
	for b.Loop() {
		// As many bounded invocations as the read bound needs.
		var cur *Cursor
		n := 0
		for cur == nil || cur.Offset < st.Size() {
			recs, next, err := Read(root, sess, cur, work1, Options{FromStart: true, Flush: true, Now: now})
			if err != nil {
				b.Fatal(err)
			}
			n += len(recs)
			cur = next
		}
		if n != msgs {
			b.Fatalf("%d records, want %d", n, msgs)
		}
	}
}

// BenchmarkReadTurn reads what one turn appends (~50 KB) at the end of a 5
// MB transcript: the usual hook cost.
func BenchmarkReadTurn(b *testing.B) {
	root, _ := realisticTranscript(b, 5<<20)
	path := filepath.Join(root, sess+".jsonl")
	data, _ := os.ReadFile(path)
	// The cursor sits 4 turns before the end.
	cut := len(data)
	for i := 0; i < 4; i++ {
		cut = bytes.LastIndex(data[:cut-1], []byte(`{"type":"user","message":{"role":"user","content":"prompt`))
	}
	_, cur, err := Read(root, sess, nil, work1, Options{FromStart: false, Now: now})
	if err != nil {
		b.Fatal(err)
	}
	cur.Offset = int64(cut)
	b.SetBytes(int64(len(data) - cut))
	b.ResetTimer()
	for b.Loop() {
		c := *cur
		if _, _, err := Read(root, sess, &c, work1, Options{Now: now}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadNothingNew is a hook whose transcript did not grow.
func BenchmarkReadNothingNew(b *testing.B) {
	root, _ := realisticTranscript(b, 5<<20)
	_, cur, err := Read(root, sess, nil, work1, Options{Now: now})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		c := *cur
		if _, _, err := Read(root, sess, &c, work1, Options{Now: now}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReferenceReadFile is the reference: reading the same 5 MB file
// and counting its lines, no parsing.
func BenchmarkReferenceReadFile(b *testing.B) {
	root, _ := realisticTranscript(b, 5<<20)
	path := filepath.Join(root, sess+".jsonl")
	st, _ := os.Stat(path)
	b.SetBytes(st.Size())
	for b.Loop() {
		data, err := os.ReadFile(path)
		if err != nil || bytes.Count(data, []byte{'\n'}) == 0 {
			b.Fatal(err)
		}
	}
}
