"""The real data set (scikit-learn's bundled digits) and the models that train on it: a fixed, stratified
split; each worker's own shard; and real PyTorch jobs on loopback whose loss falls and whose test
accuracy, measured by the PS (ring: rank 0) on the held-out split, ends far above chance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pcnlab.experiments.config import schema as experiment_schema
from pcnlab.workloads import JobSpec, Workloads
from pcnlab.workloads import catalog
from pcnlab.workloads.process_config import TrainConfig
from pcnlab.workloads.datasets import DIGITS_CLASSES, digits, digits_split, shard_indices
from pcnlab.workloads.models import Task, build_model, compute_gradients, evaluate
from pcnlab.workloads.training_common import should_evaluate

CHANCE = 1 / DIGITS_CLASSES


def test_the_split_is_fixed_stratified_and_disjoint():
    x, y = digits()
    assert x.shape == (1797, 64) and x.dtype == np.float32 and 0.0 <= x.min() and x.max() == 1.0
    a, b = digits_split(), digits_split()
    for field in ("x_train", "y_train", "x_test", "y_test"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert len(a.y_test) == 359 and len(a.y_train) == 1438
    # 20 % of every class (each has 174-183 images), rounded
    assert np.bincount(a.y_test).tolist() == [round(0.2 * n) for n in np.bincount(y)]
    # Train and test are the data set split in two: no image in both, none lost.
    rows = {r.tobytes() for r in a.x_test}
    assert sum(r.tobytes() in rows for r in a.x_train) <= 5  # the data set itself holds a few duplicates
    assert len(a.y_train) + len(a.y_test) == len(y)


def test_each_worker_trains_on_its_own_shard():
    n = 1438
    shards = [shard_indices(n, i, 3) for i in range(3)]
    assert sorted(np.concatenate(shards).tolist()) == list(range(n))
    assert {len(s) for s in shards} == {480, 479}
    tasks = [Task("digits-mlp", seed=1, shard=i, shards=3) for i in range(3)]
    split = digits_split()
    for i, task in enumerate(tasks):
        x, y = task.batch(32, rank=99, iteration=0)       # the rank does not choose digits batches
        mine = {r.tobytes() for r in split.x_train[shards[i]]}
        assert x.shape == (32, 64) and all(r.numpy().tobytes() in mine for r in x)
    again = Task("digits-mlp", seed=1, shard=0, shards=3)
    assert torch.equal(again.batch(32, 0, 5)[0], tasks[0].batch(32, 0, 5)[0])     # deterministic
    assert not torch.equal(tasks[0].batch(32, 0, 5)[0], tasks[0].batch(32, 0, 6)[0])
    # One epoch of a shard visits 14 batches of distinct examples (the last partial batch skipped).
    epoch = torch.cat([tasks[0].batch(32, 0, it)[0] for it in range(479 // 32)])
    assert len({r.numpy().tobytes() for r in epoch}) >= 32 * 14 - 3  # the data set holds a few duplicates


def test_one_model_list_and_evaluation_schedule():
    assert experiment_schema.MODELS is catalog.MODELS
    assert set(catalog.DIGITS_MODELS) <= set(catalog.MODELS)
    assert catalog.process_model("resnet50") == "profile:resnet50"
    assert catalog.process_model("digits-cnn") == "digits-cnn"
    cfg = TrainConfig(iterations=25, eval_every=10)
    assert [it for it in range(25) if should_evaluate(cfg, it)] == [9, 19, 24]
    cfg.eval_every = 0
    assert [it for it in range(25) if should_evaluate(cfg, it)] == [24]


@pytest.mark.parametrize("name", catalog.DIGITS_MODELS)
def test_digits_models_learn_in_one_process(name):
    model = build_model(name, seed=0)
    task = Task(name, seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    before = evaluate(model, task)[0]
    losses = []
    for it in range(60):
        losses.append(compute_gradients(model, task, 32, 0, it, 0))
        optimizer.step()
    accuracy, test_loss = evaluate(model, task)
    print(f"{name}: loss {losses[0]:.2f} -> {np.mean(losses[-5:]):.2f}; test accuracy {before:.2f} -> {accuracy:.2f}")
    assert np.mean(losses[-5:]) < 0.6 * losses[0]
    assert accuracy > 0.6 > 3 * CHANCE > before - 0.1


@pytest.mark.slow
@pytest.mark.parametrize("kind,model", [("ps", "digits-mlp"), ("ring", "digits-cnn")])
def test_training_on_digits_over_loopback(tmp_path, kind, model):
    hosts = dict(servers=("h1",), workers=("h2", "h3")) if kind == "ps" else dict(workers=("h1", "h2"))
    spec = JobSpec(name="digits", kind=kind, iterations=60, model=model, batch=32, lr=0.2, eval_every=20, **hosts)
    job = Workloads(tmp_path).start_job(spec).wait(timeout=90)
    evaluator = "ps0" if kind == "ps" else "worker0"
    for p in job.procs:
        records = job.records(p.label)
        evals = [(r["iter"], r["accuracy"]) for r in records if "accuracy" in r]
        if p.label != evaluator:
            assert evals == [], p.label
            continue
        print(f"{kind} {model}: test accuracy {evals}")
        assert [it for it, _ in evals] == [19, 39, 59]
        assert evals[-1][1] > 0.7 and evals[-1][1] > evals[0][1] - 0.05
    for w in [p for p in job.procs if p.label.startswith("worker")]:
        loss = [r["loss"] for r in job.records(w.label)]
        assert np.mean(loss[-5:]) < 0.5 * np.mean(loss[:5]), (w.label, loss)
