#!/usr/bin/env bash
# The trace scanner's tests once more, on a build of profiling/analysis/reading/_scan.c under
# AddressSanitizer and UBSan (CI runs it; a report fails it): tests/conftest.py loads the build
# named by SCANNER_BUILD in place of the installed one. The sanitizers' runtime is preloaded, as
# the Python interpreter is not built with them.
#   bash tests/sanitize_scanner.sh [PYTHON]     (default: .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all \
    -Wall -Werror -I"$include" profiling/analysis/reading/_scan.c -o "$build/_scan.so"
LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    SCANNER_BUILD="$build/_scan.so" REQUIRE_SCANNER=1 \
    "$python" -m pytest -q -p no:cacheprovider tests/test_trace_scan.py tests/test_trace_fuzz.py
