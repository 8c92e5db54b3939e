package hookcore

import "os"

// execHook replaces this process with `full change-capture hook-claude`
// reading payload on its stdin (payloadFile). It returns only when that
// failed.
func execHook(full string, payload []byte) error {
	f, err := payloadFile()
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(payload); err != nil {
		return err
	}
	if _, err := f.Seek(0, 0); err != nil {
		return err
	}
	if err := dupStdin(f); err != nil {
		return err
	}
	return execve(full, []string{full, "change-capture", "hook-claude"}, os.Environ())
}
