"""The local runtime (DESIGN.md §4): a whole installation on one machine.

`brokergroup local up` runs 3 controller nodes and N brokers as processes
under a supervisor that restarts them (a broker on a new loopback address,
like a rescheduled pod) and shows a live status view. Modules:

- pure: `config`, `addresses`, `backoff`, `plan`, `status`, `targets`
- I/O: `state` (state.json), `procs` (pids), `probe` (HTTP), `supervisor`,
  `commands` (the CLI handlers)
"""
