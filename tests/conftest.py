"""Shared fixtures: tiny random-weight checkpoints, built once per test run."""

from __future__ import annotations

import pytest

from mobius.testing.tiny import make_checkpoint


class CheckpointCache:
    def __init__(self, root) -> None:
        self.root = root
        self.built: dict[str, tuple] = {}

    def get(self, model_type: str):
        """(directory, HF model in eval mode, config) for a tiny random ``model_type`` checkpoint."""
        if model_type not in self.built:
            directory = self.root / model_type
            model, config = make_checkpoint(model_type, directory)
            self.built[model_type] = (directory, model, config)
        return self.built[model_type]


@pytest.fixture(scope="session", autouse=True)
def _graph_cache_off(tmp_path_factory):
    """The CLI's graph cache off for the suite (builds run cold, as they are tested) and, where a
    test turns it on, in a directory of this session, never the user's ~/.cache/mobius; also
    for the CLI processes tests start, which inherit the environment."""
    import os

    saved = {k: os.environ.get(k) for k in ("MOBIUS_CACHE", "MOBIUS_NO_CACHE")}
    os.environ["MOBIUS_CACHE"] = str(tmp_path_factory.mktemp("mobius-cache"))
    os.environ["MOBIUS_NO_CACHE"] = "1"
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session", autouse=True)
def _one_thread_per_worker():
    """Under pytest-xdist (one worker per core), torch and onnxruntime run on one intra-op thread
    in each worker, and so do the CLI processes tests start (``OMP_NUM_THREADS``): with two
    threads each, the workers' threads spin-wait for each other on the shared cores (the task
    tests took 95 s against 83 s). Run alone (``-p no:xdist``), the defaults stay."""
    import os

    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    import onnxruntime as ort
    import torch

    threads, omp = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    create = ort.InferenceSession.__init__

    def one_thread_session(self, path_or_bytes, sess_options=None, *args, **kwargs):
        if sess_options is None:
            sess_options = ort.SessionOptions()
        if sess_options.intra_op_num_threads == 0:  # not chosen by the test
            sess_options.intra_op_num_threads = 1
        create(self, path_or_bytes, sess_options, *args, **kwargs)

    ort.InferenceSession.__init__ = one_thread_session
    yield
    ort.InferenceSession.__init__ = create
    torch.set_num_threads(threads)
    if omp is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = omp


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> CheckpointCache:
    return CheckpointCache(tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture(autouse=True)
def _restore_cli_state():
    """``mobius.cli.main`` installs SIGINT/SIGTERM handlers, records stop requests and sets the
    mobius log level; undo all three after each test so one in-process CLI run cannot change how
    the next test is interrupted or what it logs."""
    import logging
    import signal

    from mobius import failures

    logger = logging.getLogger("mobius")
    level = logger.level
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)
    logger.setLevel(level)
    failures.reset()


@pytest.fixture(scope="session")
def tiny_llava_vlm(tmp_path_factory):
    """A tiny LLaVA with a local processor, converted once through the CLI (image-text-to-text):
    (checkpoint directory, HF model, processor, output directory)."""
    from mobius.cli import main
    from mobius.testing.vlm import tiny_llava_with_processor

    root = tmp_path_factory.mktemp("llava")
    model, processor = tiny_llava_with_processor(root / "checkpoint")
    out = root / "onnx"
    assert main(["build", "--model", str(root / "checkpoint"), "--output", str(out), "-q"]) == 0
    return root / "checkpoint", model, processor, out


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow modules (real weights, the largest overrides) first. Each test file runs on one
    pytest-xdist worker (``--dist loadfile``), so a long file picked up last would set the suite's
    wall time on its own; started first, the other files fill the other worker around it."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: order kept
