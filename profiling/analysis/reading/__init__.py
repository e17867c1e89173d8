"""Stage 1: a Chrome trace file into columns (:class:`~.trace_columns.TraceEvents`), by the C
scanner or the Python reader, refused alike (:class:`~.trace_errors.TraceFormatError`)."""
