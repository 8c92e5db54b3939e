package cli

// rootCommands lists the top-level command groups. Each group lives in its
// own file so that features can grow without touching each other.
func rootCommands() []*Command {
	return append([]*Command{
		changeCaptureCommand(),
		hubCommand(), clientCommand(), workCommand(),
		changelogCommand(), snapshotCommand(), rewindCommand(), revertCommand(),
		blameCommand(), attributionCommand(), exportTraceCommand(),
		uiCommand(),
	}, newcomerCommands()...)
}
