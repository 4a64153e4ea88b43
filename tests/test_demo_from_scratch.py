"""scripts/demo_from_scratch.py, the README's first command after the install: it must keep working as it says."""

import pytest

from helpers import load_script

demo = load_script("demo_from_scratch")

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_demo_learns_its_pairs_and_translates_them_after_a_save_and_reload(capsys):
    greedy = demo.main()  # the defaults the README runs: 150 steps, seed 0 (about 5 seconds on one core)
    assert greedy == [target for _, target in demo.PAIRS[:3]]
    printed = capsys.readouterr().out
    assert "beam-4: 'Ein Mann reitet ein Pferd.'" in printed
    losses = {int(line.split()[1]): float(line.split()[3]) for line in printed.splitlines() if line.startswith("step")}
    assert losses[150] < losses[1] / 5


def test_too_few_steps_leave_it_untrained():
    # the check above is not satisfied by any model: three steps are not enough to learn the pairs
    assert demo.main(steps=3) != [target for _, target in demo.PAIRS[:3]]
