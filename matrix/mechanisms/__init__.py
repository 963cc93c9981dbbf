"""Ways to cause faults, each a `matrix.fault.MatrixFault` with its ground truth.

demo_faults.py wraps the demo's four faults (with their parameters opened up); the other
modules add mechanisms the demo does not rehearse.
"""
