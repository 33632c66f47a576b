"""The `labops` command line: a mistyped option or exercise id is named in one line, never ignored.

Each test calls ``main(argv)`` in this process, as the `labops` script does; none builds the ops.
"""

import os

import pytest

from labops.__main__ import _shown, main


@pytest.mark.parametrize("argv", [
    ["doctor", "--cuda"],
    ["build", "--force"],
    ["exercises", "tanh_backward", "--verbose"],
    ["audit-grades", "--dry-run"],
    ["speed-board", "--assignment", "ex09_cuda_kernels", "--fast"],
], ids=lambda argv: argv[0])
def test_every_subcommand_rejects_an_unknown_option_by_name(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"labops {argv[0]}: error: unrecognized arguments: {argv[-1]}" in err, err


def test_bench_options_reach_the_bench_parser(capsys):
    """bench's options are its own parser's (labops.bench.main): an unknown one is named by `labops bench`."""
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--device", "cpu", "--sutie", "softmax"])
    assert exit_.value.code == 2
    assert "labops bench: error: unrecognized arguments: --sutie softmax" in capsys.readouterr().err


def test_an_unknown_exercise_is_one_line_naming_it_and_the_valid_ids(capsys):
    from labops.exercises import EXERCISES

    assert main(["exercises", "nosuch"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert "'nosuch'" in err and all(exercise_id in err for exercise_id in EXERCISES)


def test_a_known_exercise_and_the_list(capsys):
    assert main(["exercises", "tanh_backward"]) == 0
    assert capsys.readouterr().out.startswith("tanh_backward: ")
    assert main(["exercises"]) == 0
    assert "tanh_backward" in capsys.readouterr().out


def test_doctor_writes_the_home_folder_as_a_tilde():
    home = os.path.expanduser("~")
    assert _shown(os.path.join(home, ".cache", "labops", "x.so")) == os.path.join("~", ".cache", "labops", "x.so")
    assert _shown(home + "-other/x") == home + "-other/x"  # a sibling of home is not inside it
    assert _shown("/opt/python/bin/python3") == "/opt/python/bin/python3"
