"""Settings every test tier shares."""

from hypothesis import settings

# Hypothesis's 200 ms per-example deadline is a timing assert: on a loaded 2-core CI machine
# it fails correct code (test_operator_labels once took 266 ms). Timings belong to bench/.
settings.register_profile("brokergroup", deadline=None)
settings.load_profile("brokergroup")
