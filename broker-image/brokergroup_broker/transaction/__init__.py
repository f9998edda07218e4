"""Transactional messages (issue 34 item 2; docs/transactions.md): `rules` RocketMQ's names
and the half/commit/op record rules, `half_queue` the pure decisions of the half queue
(what is resolved, what to check, what to discard, the progress to persist), `service` the
master's check loop and END_TRANSACTION over the one produce path."""
