"""vaswani.training.optimization: the paper's Adam and learning-rate schedule (section 5.3) as the defaults, and a
cooldown that anneals the last updates to zero."""

import pytest

from helpers import tiny_config
from vaswani import VaswaniForConditionalGeneration
from vaswani.training.arguments import parse_arguments
from vaswani.training.optimization import build_optimizer_and_schedule

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_defaults_are_the_papers_recipe():
    data, model_args, args = parse_arguments([])
    assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert (args.warmup_steps, args.tokens_per_update, args.learning_rate) == (4000, 25000, None)
    assert (model_args.label_smoothing, model_args.dropout) == (0.1, 0.1)
    assert (args.eval_num_beams, args.eval_length_penalty) == (4, 0.6)

    model = VaswaniForConditionalGeneration(tiny_config(d_model=512, encoder_attention_heads=8,
                                                        decoder_attention_heads=8))
    optimizer, schedule = build_optimizer_and_schedule(model, 512**-0.5 * 4000**-0.5, 4000)
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.98) and optimizer.param_groups[0]["eps"] == 1e-9
    paper = lambda step: 512**-0.5 * min(step**-0.5, step * 4000**-1.5)  # noqa: E731
    rates = {}
    for step in range(1, 16001):  # the rate used by update number `step`
        rates[step] = optimizer.param_groups[0]["lr"]
        optimizer.step()
        schedule.step()
    for step in (1, 2, 1000, 4000, 4001, 16000):
        assert rates[step] == pytest.approx(paper(step), rel=1e-9)


def test_a_cooldown_anneals_the_last_updates_to_zero_and_leaves_the_rest_alone():
    model = VaswaniForConditionalGeneration(tiny_config())
    plain_optimizer, plain_schedule = build_optimizer_and_schedule(model, 1e-3, 10)
    optimizer, schedule = build_optimizer_and_schedule(model, 1e-3, 10, max_steps=100, cooldown_steps=30)
    plain, cooled = {}, {}
    for step in range(1, 101):
        plain[step], cooled[step] = plain_optimizer.param_groups[0]["lr"], optimizer.param_groups[0]["lr"]
        for opt, sched in ((plain_optimizer, plain_schedule), (optimizer, schedule)):
            opt.step()
            sched.step()
    assert all(cooled[step] == plain[step] for step in range(1, 71))  # warmup and decay untouched
    assert cooled[71] == pytest.approx(plain[71] * 30 / 31)
    assert cooled[100] == pytest.approx(plain[100] / 31) and cooled[100] > 0  # the last update still moves
    assert all(cooled[step + 1] < cooled[step] for step in range(70, 100))
    assert optimizer.param_groups[0]["lr"] == 0.0  # an update past max_steps would not move the weights

    with pytest.raises(ValueError, match="A cooldown needs max_steps"):
        build_optimizer_and_schedule(model, 1e-3, 10, cooldown_steps=30)
    with pytest.raises(ValueError, match=r"--cooldown_steps must be between 0 and --max_steps \(100\), got 101"):
        parse_arguments(["--max_steps", "100", "--warmup_steps", "10", "--cooldown_steps", "101"])
    # a run shorter than its warmup is allowed, with or without a cooldown (the factors multiply)
    parse_arguments(["--max_steps", "3", "--warmup_steps", "4000"])
    parse_arguments(["--max_steps", "3", "--warmup_steps", "4000", "--cooldown_steps", "3"])
    with pytest.raises(ValueError, match=r"--cooldown_steps must be between 0 .* got -1"):
        parse_arguments(["--cooldown_steps", "-1"])
