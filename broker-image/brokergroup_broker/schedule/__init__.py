"""Scheduled and timer messages with retry back-off (issue 34 item 1;
docs/scheduled-messages.md): `rules` RocketMQ's names and send-time rules, `scheduler` the
pure delivery decisions of one schedule queue, `service` the master's delivery loop."""
