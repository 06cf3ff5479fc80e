"""The running process: manager, work queue, event routing, metrics, probes, logs."""
