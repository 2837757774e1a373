"""`clusterkit goodput simulate` and `advise` as a user meets them: JSON for scripts, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from clusterkit.cli import main
from clusterkit.goodput.categories import CATEGORIES

SMALL = ["--gpus", "512", "--days", "3", "--checkpoint-gib", "200", "--runs", "2"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clusterkit", *args], capture_output=True, text=True)


def test_simulate_json_gives_each_policys_goodput_and_categories_that_sum_to_the_wall_clock():
    result = run_cli("goodput", "simulate", *SMALL, "--interval", "600", "--output", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert [p["name"] for p in document["policies"]] == ["slurm-alone", "clusterkit-requeue", "clusterkit-spares"]
    for policy in document["policies"]:
        assert 0 < policy["goodput"] <= 1 and list(policy["categories"]) == list(CATEGORIES)
        assert sum(policy["categories"].values()) == pytest.approx(3 * 86_400, abs=1)
        assert policy["wall_s"] == pytest.approx(3 * 86_400, abs=1) and policy["interval_s"] == 600
        assert policy["goodput"] == pytest.approx(policy["categories"]["productive"] / policy["wall_s"])
    assert document["scenario"]["gpus"] == 512 and document["llama3_reported_goodput"] == 0.9


def test_simulate_table_shows_the_policies_beside_llama3(capsys):
    assert main(["goodput", "simulate", *SMALL, "--interval", "auto", "--seed", "4"]) == 0
    out = capsys.readouterr().out
    assert "512 GPUs (64 nodes) for 3 days" in out and "> 90%" in out
    for name in ("slurm-alone", "clusterkit-requeue", "clusterkit-spares"):
        assert f"\n{name} " in out


def test_the_same_seed_prints_the_same_figures(capsys):
    outputs = []
    for _ in range(2):
        assert main(["goodput", "simulate", *SMALL, "--interval", "900", "--seed", "7", "--output", "json"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]


def test_advise_prints_the_interval_the_spares_and_the_goodput_beside_slurm_alone(capsys):
    assert main(["goodput", "advise", *SMALL, "--output", "json"]) == 0
    advice = json.loads(capsys.readouterr().out)
    assert advice["interval_s"] > 0 and 0 <= advice["spares"] <= 4
    assert advice["goodput"] > advice["goodput_at_tenth_interval"]
    assert advice["goodput"] > advice["goodput_at_tenfold_interval"]
    assert advice["goodput"] > advice["slurm_alone"]["goodput"] and advice["llama3_reported_goodput"] == 0.9
    assert main(["goodput", "advise", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "checkpoint every" in out and "spare nodes:" in out and "Slurm alone" in out and "> 90%" in out


FLAGS = ["--gpus", "--days", "--failures-per-gpu-hour", "--checkpoint-gib", "--save-gbps", "--restart-s",
         "--replacement-s", "--hang-timeout", "--spares", "--free-nodes", "--interval", "--runs", "--seed"]


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("value", ["-1", "nan", "inf", "-inf", "1e400", "1e30", "abc", "", "$(reboot)", "1\u2028"])
def test_a_hostile_value_is_one_line_naming_the_flag(flag, value, capsys):
    assert main(["goodput", "simulate", "--days", "1", "--gpus", "64", f"{flag}={value}"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"error: {flag} ") and "Traceback" not in captured.err


@pytest.mark.parametrize("flag", ["--gpus", "--days", "--failures-per-gpu-hour", "--checkpoint-gib", "--save-gbps",
                                  "--interval", "--runs", "--gpus-per-node"])
def test_zero_is_refused_where_it_means_nothing(flag, capsys):
    assert main(["goodput", "simulate", flag, "0"]) == 1
    assert capsys.readouterr().err.startswith(f"error: {flag} '0': must be ")


def test_a_fraction_where_a_whole_number_is_needed_names_the_flag(capsys):
    assert main(["goodput", "simulate", "--gpus", "1.5"]) == 1
    assert "--gpus '1.5': must be a whole number" in capsys.readouterr().err


def test_a_run_too_big_to_simulate_is_one_line_before_any_work(capsys):
    assert main(["goodput", "simulate", "--gpus", "10000000", "--days", "3650", "--failures-per-gpu-hour",
                 "0.001"]) == 1
    assert "too many to simulate" in capsys.readouterr().err


def test_the_cli_loads_numpy_only_when_a_goodput_verb_runs():
    code = ("import sys; from clusterkit.cli import build_parser; "
            "build_parser(['goodput', 'simulate']).parse_args(['goodput', 'simulate']); "
            "print('numpy' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_an_instance_type_gives_the_accelerators_per_node(capsys):
    assert main(["goodput", "simulate", *SMALL, "--interval", "600", "--instance-type", "trn1", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"]["nodes"] == 32  # 512 / 16 Trainium chips
    for bad, words in ((["--instance-type", "c5.9xlarge"], "has no accelerators"),
                       (["--instance-type", "p9.fake"], "unknown instance type 'p9.fake'"),
                       (["--instance-type", "p5", "--gpus-per-node", "8"], "both say")):
        assert main(["goodput", "simulate", *bad]) == 1
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1
