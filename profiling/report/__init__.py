"""Cross-rank report of a folder of traces (:func:`.build.build_report`; the command:
``python -m jobs.commands.report <job folder>``). Its ``__init__`` imports nothing: a light
module of this room (the hang's verdict, on a rank's way out or the login node) does not bring
the report's whole pipeline with it.

A map and a reduce: each trace is read once, by whoever is nearest to it, into an analysis
record (:mod:`profiling.analysis.per_trace.record`, kept in ``meta/analysis/``; :mod:`.read`,
:mod:`.slurm_array`); the records are measured together (:mod:`profiling.analysis`, its stages)
and rendered here (:mod:`.render`, :mod:`.page`, :mod:`.plot`); the merged timeline is an
archive of the traces themselves (:mod:`profiling.archive`). Written to ``<folder>/meta/`` (or ``--out``):

``report.json``
    Typed by :mod:`profiling.schema.model` (msgspec Structs, every field documented), which
    checks every report as it is written; ``docs/report.schema.json`` is its JSON Schema and
    docs/report.md lists its fields, both made from the model
    (:mod:`profiling.report.model_docs`). Per rank: steps and their breakdown, GPU time and
    idle causes, kernels, collectives and their bus bandwidth, the clock's alignment; for the
    job: the straggler verdict and its evidence, kernels and collectives across ranks, how the
    traces were read, the archive, and the whole run from the step logs.
``report.md``
    The same as tables, with the straggler verdict and each rank's clock alignment.
``report.png``
    Each rank's breakdown and step times: bars and lines, heat maps above 32 ranks; on GPU
    traces, each rank's GPU time by kernel family and the collectives' bus bandwidth.
``run.png``
    The run map: every rank's CPU time per step against the other ranks' median, rank x step
    (a slow rank is a stripe, a slow node a band), its slow segments boxed, and the median
    step time above.
``merged_trace.tar``
    The traces of the ranks that matter, as one Perfetto timeline (:mod:`profiling.archive`).
"""
