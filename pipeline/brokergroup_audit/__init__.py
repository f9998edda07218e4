"""The PySpark audit pipeline (DESIGN.md §7, docs/audit.md): `brokergroup audit`.

Reads replica stores (this project's or RocketMQ 5's) through the broker's one
record-layout definition (`brokergroup_broker.store.message` and its vectorised
twin `record_columns`), checks acknowledged loss, replica divergence, duplicates,
epoch lineage and failovers, and writes summary.json, Parquet and report.html.
"""
