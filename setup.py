"""The build's one part that setup.cfg cannot say: the trace scanner, a C extension.

Optional: where no C compiler is found the install goes on without it, and traces are read
the Python way (profiling/analysis/reading/trace_scan.py), the same columns at half the speed."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "profiling.analysis.reading._scan",
            ["profiling/analysis/reading/_scan.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ]
)
