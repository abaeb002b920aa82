"""Data-parallel training on CPUs (gloo, 2 processes): one step equals one process's step, a killed process ends the
run with one clear error and an intact checkpoint, and a resumed 2-process run continues exactly."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from transformer.checkpoint import load_model_dir, read_training_checkpoint
from transformer.distributed import RUN_CLI, World, cause_first, shard

from corpus import write_corpus

WORKER = Path(__file__).parent / "ddp_worker.py"
pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    "The command line in a fresh interpreter, on the CPU (gloo) even where GPUs are present."
    return subprocess.run([sys.executable, *RUN_CLI, *args, "--device", "cpu"], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def test_shards_cover_a_micro_batch_in_order():
    for n in range(0, 12):
        for size in range(1, 5):
            shares = [shard(list(range(n)), World(r, size)) for r in range(size)]
            assert sum(shares, []) == list(range(n)) and max(map(len, shares)) - min(map(len, shares)) <= 1


def train_two_steps(out: Path, precision: str, processes: int) -> dict[str, torch.Tensor]:
    "The worker's weights after its 2 steps, on 1 process or on `processes` under torchrun (gloo)."
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    launch = launch if processes > 1 else []
    run = subprocess.run([sys.executable, *launch, str(WORKER), str(out), precision], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert processes == 1 or "smallest micro-batch: 1 sentence" in run.stdout
    return load_file(str(out))


def test_two_processes_take_the_step_of_one(tmp_path):
    """Two optimizer steps on 2 processes give the weights of the same steps on 1 process over the union of the
    batches, including a micro-batch of one sentence, where one process has nothing and joins with zero weight."""
    one, two = train_two_steps(tmp_path / "one", "fp32", 1), train_two_steps(tmp_path / "two", "fp32", 2)
    assert one.keys() == two.keys()
    for k in one:
        torch.testing.assert_close(two[k], one[k], atol=1e-5, rtol=1e-4, msg=k)


def test_two_processes_take_the_fp16_step_of_one(tmp_path):
    """In fp16, both processes' gradient scalers end in the state of the single process's, and no weight tensor of
    the 2-process run is further from the single process's than twice fp16's own distance from fp32.

    Each process multiplies half a micro-batch, so fp16 rounds its products apart from the whole micro-batch's; how
    far depends on the CPU's kernels, and one element's gradient can lose most of its digits where its terms cancel.
    So the yardstick is measured here, on this CPU, tensor by tensor: a correct 2-process run strays from fp32 about
    as far as the single process does, hence (triangle inequality) from the single process by at most about twice
    that; a lost or misweighted share moves the weights by about the whole update, over 10 times more."""
    one = train_two_steps(tmp_path / "one", "fp16", 1)
    two = train_two_steps(tmp_path / "two", "fp16", 2)
    exact = train_two_steps(tmp_path / "exact", "fp32", 1)
    scaler = (tmp_path / "one.scaler-0.json").read_text()
    assert [(tmp_path / f"two.scaler-{rank}.json").read_text() for rank in (0, 1)] == [scaler, scaler]
    start = load_file(str(tmp_path / "exact.start"))
    moved = torch.cat([(exact[k] - start[k]).flatten() for k in exact]).norm()
    fp16_error = {k: (one[k] - exact[k]).norm() for k in one}
    assert torch.stack(list(fp16_error.values())).norm() < 0.1 * moved  # fp16 follows fp32: a sane yardstick
    for k in one:
        assert (two[k] - one[k]).norm() <= 2 * fp16_error[k], k


def test_resume_after_two_processes_continues_exactly(tmp_path):
    """4 steps on 2 processes in one go == 2 steps, then a resumed run to 4 (dropout on: every rank's RNG is kept)."""
    config = write_corpus(tmp_path, dropout=0.1)
    straight = cli("train", "--config", str(config), "--out", "straight", "--nproc", "2", "--max-steps", "4",
                   "--quiet", cwd=tmp_path)
    assert straight.returncode == 0, straight.stderr
    first = cli("train", "--config", str(config), "--out", "split", "--nproc", "2", "--max-steps", "2", "--quiet",
                cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = cli("train", "--config", str(config), "--out", "split", "--nproc", "2", "--max-steps", "4", "--resume",
                 "--quiet", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    a = load_file(str(tmp_path / "straight/checkpoints/step-0000004/model.safetensors"))
    b = load_file(str(tmp_path / "split/checkpoints/step-0000004/model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    state, _, rng = read_training_checkpoint(tmp_path / "split/checkpoints/step-0000004",
                                             load_model_dir(tmp_path / "split/checkpoints/step-0000004").cfg)
    assert state["world_size"] == 2 and {"torch_cpu", "rank1.torch_cpu"} <= set(rng)


def rank_pid(launcher: int, rank: int) -> int | None:
    "The pid of the process with RANK=`rank` among the descendants of `launcher` (Linux /proc)."
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            pid, parents = int(proc.name), []
            while pid > 1:  # walk up to see whether the launcher started it
                pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
                parents.append(pid)
        except (OSError, ValueError, IndexError):
            continue
        if f"RANK={rank}".encode() in env and launcher in parents:
            return int(proc.name)
    return None


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the process to kill through /proc")
def test_a_killed_process_ends_the_run_with_one_clear_error(tmp_path):
    """SIGKILL one of two processes mid-run: the command exits 2 with one line naming the process, the signal and
    the last checkpoint, which is intact and resumes."""
    config = write_corpus(tmp_path, dropout=0.1)
    err = open(tmp_path / "stderr.txt", "w")
    run = subprocess.Popen([sys.executable, *RUN_CLI, "train", "--config", str(config), "--out", "run",
                            "--nproc", "2", "--max-steps", "100000", "--quiet", "--device", "cpu"], cwd=tmp_path,
                           stdout=err, stderr=err)
    latest = tmp_path / "run/checkpoints/latest"
    deadline = time.monotonic() + 120
    while not latest.is_file() and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.2)
    victim = rank_pid(run.pid, 1)
    assert latest.is_file() and victim is not None, (tmp_path / "stderr.txt").read_text()
    os.kill(victim, signal.SIGKILL)
    assert run.wait(timeout=120) == 2
    err.close()
    last_line = (tmp_path / "stderr.txt").read_text().strip().splitlines()[-1]
    assert last_line.startswith("transformer train: error: process 1 of 2 was killed by SIGKILL"), last_line
    kept = tmp_path / "run/checkpoints" / latest.read_text().strip()
    assert f"the last checkpoint, {Path('run/checkpoints') / kept.name}, is intact" in last_line, last_line
    model = load_model_dir(kept)  # loads, and the training state reads back whole
    step = read_training_checkpoint(kept, model.cfg)[0]["step"]
    resumed = cli("train", "--config", str(config), "--out", "run", "--nproc", "2", "--max-steps", str(step + 2),
                  "--resume", "--quiet", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "run/checkpoints/latest").read_text().strip() == f"step-{step + 2:07d}"


def test_resume_with_another_number_of_processes_says_so(tmp_path):
    """A 2-process run resumed on 1 process goes on (the steps cover the same sentences) and says what differs."""
    config = write_corpus(tmp_path)
    first = cli("train", "--config", str(config), "--out", "run", "--nproc", "2", "--max-steps", "2", "--quiet",
                cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    resumed = cli("train", "--config", str(config), "--out", "run", "--max-steps", "4", "--resume", "--quiet",
                  cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming a run of 2 process(es) with 1" in resumed.stderr
    assert (tmp_path / "run/checkpoints/latest").read_text().strip() == "step-0000004"


def test_bad_settings_are_one_error_before_any_process_starts(tmp_path):
    config = write_corpus(tmp_path)
    (tmp_path / "train.en").unlink()
    done = cli("train", "--config", str(config), "--out", "run", "--nproc", "2", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("error") == 1 and "train.en not found" in done.stderr
    done = cli("train", "--preset", "tiny", "--train-src", "x.de", "--out", "run", "--nproc", "2", cwd=tmp_path)
    assert done.returncode == 2 and "train_src and train_tgt go together" in done.stderr
    assert not (tmp_path / "run").exists()


def test_the_failed_process_is_named_not_the_ones_it_took_down():
    """A process killed by a signal is the cause; the agent's SIGTERM or a lost connection (code 1) are effects."""
    fake = lambda code, when: SimpleNamespace(  # noqa: E731
        exitcode=code, timestamp=when, signal_name=lambda: {-9: "SIGKILL", -15: "SIGTERM"}.get(code, ""))
    failures = {0: fake(1, 5), 1: fake(-9, 5), 2: fake(-15, 4)}
    assert min(failures, key=lambda r: cause_first(failures[r])) == 1
    failures = {0: fake(1, 3), 1: fake(2, 5)}  # a user error (exit code 2) explains a lost connection
    assert min(failures, key=lambda r: cause_first(failures[r])) == 1
