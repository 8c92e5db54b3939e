package spool

import (
	"strings"

	"github.com/agentscm/agentscm/internal/fsutil"
)

// nameClass is what one name in a spool directory is. Recovery acts on it
// (recoverLocked) and inspection reports it (Inspect) from the same
// classification.
type nameClass int

const (
	// nameWellFormed is a name its directory holds: a fixed root file or
	// directory, or a well-formed record name (the parsed fields are set).
	nameWellFormed nameClass = iota
	// nameTemp is a writer's temporary file: recovery completes it, removes
	// it as an exact duplicate or quarantines it.
	nameTemp
	// nameUnexpected is anything else: recovery quarantines it.
	nameUnexpected
)

// spoolName is one classified directory entry of a spool.
type spoolName struct {
	name  string
	class nameClass
	// The parsed fields of a well-formed name, by directory.
	outbox   outboxEntry // outboxDir
	ackSeq   uint64      // acksDir
	digest   string      // artifactsDir
	artBytes int64       // artifactsDir
	index    indexEntry  // compactDir
	intake   intakeEntry // intakeDir
}

// isRootName reports whether the spool root holds name besides temporary
// files: a fixed file or a directory.
func isRootName(name string) bool {
	if name == intakeDir || name == stagedDir {
		return true
	}
	for _, n := range rootFiles {
		if n == name {
			return true
		}
	}
	for _, n := range operationalDirs {
		if n == name {
			return true
		}
	}
	return false
}

// classifyName classifies name as an entry of the spool directory dir
// ("" is the root). It reads nothing: the name alone decides.
func classifyName(dir, name string) spoolName {
	sn := spoolName{name: name, class: nameWellFormed}
	ok := false
	switch dir {
	case "":
		ok = isRootName(name)
	case outboxDir:
		sn.outbox, ok = parseOutboxName(name)
	case acksDir:
		sn.ackSeq, ok = parseAckName(name)
	case artifactsDir:
		sn.digest, sn.artBytes, ok = parseArtifactName(name)
	case compactDir:
		sn.index, ok = parseIndexName(name)
	case intakeDir:
		sn.intake, ok = parseIntakeName(name)
	case quarantineDir, stagedDir:
		return sn // every name is an entry: counted, never quarantined here
	}
	switch {
	case ok:
	case strings.HasPrefix(name, fsutil.TempPrefix):
		sn.class = nameTemp
	default:
		sn.class = nameUnexpected
	}
	return sn
}

// classifyNames classifies the names of dir in the order recovery acts on
// them: as listed, except that the outbox's temporary files come after
// its records (completing one checks the listed records for its sequence
// number).
func classifyNames(dir string, names []string) []spoolName {
	out := make([]spoolName, 0, len(names))
	var temps []spoolName
	for _, n := range names {
		sn := classifyName(dir, n)
		if dir == outboxDir && sn.class == nameTemp {
			temps = append(temps, sn)
			continue
		}
		out = append(out, sn)
	}
	return append(out, temps...)
}

// unexpectedFate says what happens to an unexpected file of dir, as
// inspection reports it.
func unexpectedFate(dir string) string {
	if dir == intakeDir {
		return "the next lock holder will quarantine it"
	}
	return "recovery will quarantine it"
}

// seqGroups splits outbox entries sorted by sequence number into runs of
// one sequence number each.
func seqGroups(sorted []outboxEntry) [][]outboxEntry {
	var out [][]outboxEntry
	for i := 0; i < len(sorted); {
		j := i + 1
		for j < len(sorted) && sorted[j].seq == sorted[i].seq {
			j++
		}
		out = append(out, sorted[i:j])
		i = j
	}
	return out
}
