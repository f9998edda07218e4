"""Raft controller of broker replica groups (DESIGN.md §2).

Layers, from the inside out:
- `errors`, `state`, `election`: pure state machine and election policy.
- `raft_node`, `liveness`, `server`: the I/O shell (pysyncobj, aiohttp).
- `client`: the typed async client brokers and the operator use.
"""
