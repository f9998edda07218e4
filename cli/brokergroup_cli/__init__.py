"""The `brokergroup` command: dispatches to each component's subcommands."""
