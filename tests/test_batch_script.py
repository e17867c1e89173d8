"""The plain batch script (slurm/profile_resnet18.sbatch) is made from the code's defaults by one
pure function (slurm/batch_script.py), as submitit makes its own: the file is that rendering,
and a default changed in the code changes the script."""

from __future__ import annotations

import dataclasses

from jobs.commands import batch_script
from slurm.batch_script import PLAIN_SCRIPT, plain_batch_script
from slurm.common.traces_root import DEFAULT_TRACES_ROOT, TRACES_ROOT_ENV
from slurm.resources import SIGNAL_DELAY_S, SlurmResources
from tests.common import REPO


def test_the_checked_in_script_is_the_rendering_of_the_codes_defaults() -> None:
    # after changing a default: python -m jobs.commands.batch_script --write
    assert (REPO / PLAIN_SCRIPT).read_text() == plain_batch_script()


def test_each_default_comes_from_the_code_that_owns_it() -> None:
    script = plain_batch_script()
    defaults = SlurmResources()
    assert f"#SBATCH --job-name={defaults.job_name}\n" in script
    assert f"#SBATCH --time={defaults.time_min // 60:02d}:{defaults.time_min % 60:02d}:00\n" in script
    assert f"#SBATCH --signal=USR2@{SIGNAL_DELAY_S}\n" in script
    assert f"root=${{{TRACES_ROOT_ENV}:-{DEFAULT_TRACES_ROOT}}}\n" in script
    other = plain_batch_script(
        dataclasses.replace(defaults, time_min=90, job_name="mine"), nodes=2, tasks_per_node=4
    )
    assert "#SBATCH --time=01:30:00\n" in other and "#SBATCH --job-name=mine\n" in other
    assert "#SBATCH --nodes=2\n" in other and "#SBATCH --ntasks-per-node=4\n" in other


def test_the_writer_refuses_to_run_without_being_asked(capsys) -> None:
    assert batch_script.main([]) == 2
    assert "nothing to do. HINT: add --write" in capsys.readouterr().err
