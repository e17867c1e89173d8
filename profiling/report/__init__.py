"""Cross-rank report of a folder of traces: ``python -m profiling.report <job folder>``.

A map and a reduce: each trace is read once, by whoever is nearest to it, into an analysis
record (:mod:`profiling.analysis.record`, kept in ``meta/analysis/``; :mod:`.read`, :mod:`.slurm_array`);
the records are combined into the report (:mod:`.combine`) and rendered (:mod:`.render`,
:mod:`.plot`); the merged timeline is an archive of the traces themselves
(:mod:`profiling.archive`). Written to ``<folder>/meta/`` (or ``--out``):

``report.json``
    ``ranks``: per rank (sorted):

    - ``rank``, ``host``, ``device`` (``"gpu"`` if the trace has GPU activity, else ``"cpu"``),
      ``trace_files``, ``warnings`` (e.g. the rank taken from the file name), ``analysed_by``
      (trace -> who read it: ``"rank 3 on node2 (pid 4242)"``);
    - ``steps`` (the ``ProfilerStep#`` numbers), ``step_ms`` (each step's CPU span),
      ``step_time_ms`` (``mean``/``min``/``max`` of those);
    - ``breakdown_ms``: the mean per step of each part (:mod:`profiling.analysis.breakdown` says
      how each is measured). GPU: ``compute + communication + memory + other + idle =
      gpu.span_ms``, the step's GPU span. CPU: ``forward + backward + optimizer + communication
      + other = step_time_ms.mean``, the CPU span. ``accounted_ms`` is what the parts add up
      to; ``breakdown_steps_ms`` the same parts for each step (what ``profiling.compare`` reads);
    - ``compute_ms`` and ``communication_total_ms``: means of the steps' ``compute_us`` and
      ``collectives_us``;
    - ``gpu`` (null on CPU): ``span_ms``, ``busy_ms`` (``span_ms - idle``), ``idle_ms``,
      ``communication_overlapped_ms`` and ``compute_by_phase_ms``, all means per step;
      ``idle_causes_ms``: the streams' idle time per step by cause, ``host_wait``,
      ``kernel_wait`` and ``other`` (:mod:`profiling.analysis.idle`); ``unlaunched``: GPU
      activities whose launch the traces do not hold;
    - ``kernels`` (null on CPU; :mod:`.gpu_sections`): ``total_us``, ``per_step_us``,
      ``by_family_us`` and ``top``, the kernels with the most time (``name``, ``family``,
      ``count``, ``total_us``, ``per_step_us``, ``mean_us``, ``p50_us``, ``p99_us``);
    - ``collectives``: by ``kind``, ``bytes`` and ``group_size``: ``count``, ``p50_us``,
      ``p90_us``, ``max_us``, ``total_us``, ``algbw_gbps`` and ``busbw_gbps`` (null without sizes);
    - ``collective_wait`` (null for a rank whose clock could not be paired;
      :mod:`profiling.analysis.waiting`): over the ``collectives`` every compared rank reached,
      ``wait_ms`` (waiting for the last rank) and ``transfer_ms`` per step, ``waiting_share``,
      and ``last_arrivals`` (in how many this rank arrived last);
    - ``clock``: how the rank's (first) trace was put on the first rank's clock
      (:mod:`profiling.analysis.alignment`): ``method`` (``reference``, ``one host``,
      ``sequence numbers``, ``matched collectives`` or ``base time``), ``shift_us`` (added to its
      ts), ``pairs``, ``residual_us`` (median absolute deviation of the pairs' offsets),
      ``max_residual_us``, ``paired_share``, ``uncertainty_us`` (what the shift may be off by),
      ``note`` (why a rank kept its base time, or whose clock it shares); ``trace_clocks``:
      the same for each of its traces (``trace``).

    ``straggler`` (null for one rank): ``verdict`` (``straggler``, ``none`` or
    ``undetermined``), ``rank``, ``text``, and the evidence (:mod:`profiling.analysis.straggler`):
    ``collectives`` (paired on every rank), ``candidate`` and its ``lateness_ms``,
    ``last_arrivals``, ``steps_held_back`` and ``charged_ms_per_step`` per rank,
    ``step_noise_ms`` and ``threshold_ms``, ``clock_uncertainty_us`` and ``min_lateness_us``,
    ``p_value``, ``compute_ms`` per rank.
    ``step_time_spread_ms``: ``min``/``median``/``max`` of the ranks' mean step times and
    ``max_minus_min``. ``communication_wait_ms``: rank -> mean exposed communication per step.
    ``kernels_across`` (null with fewer than two GPU ranks, or none slower): ``fastest_rank``,
    ``slowest_rank`` and the ``kernels`` whose time per step differs most between them.
    ``collectives_across``: each collective over every rank (``ranks``, ``count``, the median
    ``p50_us``, the largest ``p90_us`` and ``max_us``, ``busbw_gbps`` at that p50, the
    ``slowest_rank`` and its ``slowest_busbw_gbps``, ``below_link``); ``link_gbps`` as given.
    ``reading``: ``traces``, ``from_records`` (read from fresh analysis records), ``read_here``
    (the traces this report read), ``analysed_by`` (how many records came from whom),
    ``seconds``. ``archive``: ``file``, ``ranks``, ``reference_rank``, ``traces``, ``bytes``,
    ``archive_bytes``, ``budget_bytes``, ``left_out``, ``seconds`` (null with
    ``--no-archive``). ``merged_trace`` and ``merge`` (``--merged-json``, else null).
    ``warnings``, ``generated_at``, ``seconds`` (time this report took), ``alignment_seconds``.
    ``drawn``: each picture's file name -> a fingerprint of the data it shows (a later report
    on the same data keeps the picture: :mod:`.pictures`).

    ``run`` (null without step logs; :mod:`.run`, :mod:`profiling.analysis.run_map`): the whole
    run from every rank's step log. ``metric`` (``cpu``), ``steps`` (first, last), ``columns``,
    ``gpu`` (GPU times were measured), ``slow_above`` (the ratio to the other ranks' median
    above which a step is slow) and ``noise``, ``min_steps``; ``ranks``: per rank ``median_ms``,
    ``wall_median_ms``, ``gpu_median_ms``, ``relative`` and ``individual`` scores, ``last_step``
    and the same per interval (``intervals``); ``segments``: per persistently slow stretch
    ``rank``, ``node``, ``first``, ``last``, ``slow_steps``, ``excess_ms`` and ``ratio``, the
    ``traces`` that cover it or a ``hint`` with the commands that would have; ``ends``:
    ``expected_last_step``, ``last_step``, the ranks whose log ends ``short`` of the run, and a
    ``note`` saying so (null for a run that ended); ``unreadable`` step logs.
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

from profiling.analysis.record import ReportError
from profiling.report.build import build_report
from profiling.report.cli import main
from profiling.report.combine import mean

__all__ = ["ReportError", "build_report", "main", "mean"]
