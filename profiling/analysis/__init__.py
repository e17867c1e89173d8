"""Reading traces and what is measured from them: events as columns (:mod:`.json_stream`,
:mod:`.trace_events`), what a collective is (:mod:`.collectives`), interval arithmetic
(:mod:`.intervals`), one trace's step breakdown (:mod:`.breakdown`), clock alignment
(:mod:`.alignment`), the straggler test (:mod:`.straggler`), the merged timeline (:mod:`.merge`)."""
