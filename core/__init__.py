"""The contract every part of kmon shares, importing nothing else of kmon.

- findings.py: anomaly types, severities, statuses, actions; Detection, Finding; lifecycle.
- config_keys.py: how a configuration key is declared (each package declares its own
  section with `_key`; kmon/config.py assembles them).
- kafka_apis.py, signals.py, signals_sql.py: the request signals the edge, the detectors
  and their read side share (API names, purgatory APIs, a request's judged latency, the
  per-API threshold), and their SQL forms.
"""
