"""The checks and re-traces of :func:`~patcher.trace.tracer.trace_graph`, one module each."""
