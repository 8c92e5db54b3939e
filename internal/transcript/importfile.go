package transcript

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentscm/agentscm/internal/event"
)

// MaxImportBytes bounds the transcript file an import reads.
const MaxImportBytes = 1 << 30

// ImportResult is what an import selected from one transcript file.
type ImportResult struct {
	// Records starts with the adapter_started_late gap, then the selected
	// records in file order, then one capture_interrupted gap per kind of
	// skipped record.
	Records []event.Record
	Bytes   int64
	Lines   int
}

// ImportFile reads one explicit local Claude Code JSONL transcript of one
// session: only that file (no-follow, regular, at most MaxImportBytes),
// never the provider data directory around it. It selects usage and, as
// sel says, visible user text, assistant text, tool use and tool results,
// keeping the transcript's own timestamps. Saved history is not proof of
// live observation, so the records start with an adapter_started_late gap;
// malformed, oversized and foreign records are skipped with a
// capture_interrupted gap.
func ImportFile(path, session string, sel Selection, maxLine int, now time.Time) (*ImportResult, error) {
	if !ValidSession(session) {
		return nil, fmt.Errorf("%w: session id %q is not valid", ErrRefused, session)
	}
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%w: --file %q must be an absolute path", ErrRefused, path)
	}
	if maxLine <= 0 {
		maxLine = MaxLineBytes
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symbolic link", ErrRefused, path)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrRefused, path)
	}
	if fi.Size() > MaxImportBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, over the %d-byte import bound", ErrRefused, path, fi.Size(), int64(MaxImportBytes))
	}
	res := &ImportResult{}
	gap := gapRecord(session, "transcript_import", "imported from a saved transcript: saved history is not proof of live observation", now)
	gap.Gap.Kind = event.GapAdapterStartedLate
	res.Records = append(res.Records, gap)
	p := Parser{Session: session, Select: sel, Now: now}
	r := bufio.NewReaderSize(io.LimitReader(f, MaxImportBytes+1), 64<<10)
	oversized := 0
	var line []byte
	over := false
	for {
		chunk, err := r.ReadSlice('\n')
		res.Bytes += int64(len(chunk))
		if !over {
			if len(line)+len(chunk) > maxLine+1 {
				over, line = true, line[:0] // keep discarding to the record's end
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if over || len(line) > 0 {
			res.Lines++
			if content := trimNL(line); over || len(content) > maxLine {
				oversized++
			} else {
				res.Records = p.Line(content, res.Records)
			}
		}
		line, over = line[:0], false
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
	}
	res.Records = p.Flush(res.Records)
	res.Records = p.Gaps(res.Records)
	if oversized > 0 {
		res.Records = append(res.Records, gapRecord(session, ReasonOversized, fmt.Sprintf("%d transcript records over %d bytes skipped", oversized, maxLine), now))
	}
	return res, nil
}

func trimNL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		return b[:n-1]
	}
	return b
}
