"""The contract every part of kmon shares, importing nothing else of kmon.

- findings.py: anomaly types, severities, statuses, actions; Detection, Finding; lifecycle.
- config_keys.py: how a configuration key is declared (each package declares its own
  section with `_key`; kmon/config.py assembles them).
"""
