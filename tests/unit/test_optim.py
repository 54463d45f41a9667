"""trainables/optim.py's optimizers are torch.optim's, bit for bit, and training with them imports no torch._dynamo
(1.1-1.4 s of CPU in every trial worker that would import it; docs/PERFORMANCE.md)."""
import copy
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT
from trainables import optim

BUILD = {"adam": dict(lr=0.01, weight_decay=0.1, fused=True),  # what OptimConfig.build passes
         "adamw": dict(lr=0.01, weight_decay=0.1, fused=True),
         "sgd": dict(lr=0.5, weight_decay=0.1, fused=True)}
TORCH = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}


def steps(optimizer_class, kwargs, n: int = 6, resume_at: int = 3) -> tuple[list[torch.Tensor], dict]:
    """n steps on two parameters with the same gradients every time, the optimizer rebuilt from its state_dict (as a
    checkpoint resumes) after `resume_at`; the parameters and the final state_dict."""
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(4, 3, generator=g).requires_grad_(), torch.randn(5, generator=g).requires_grad_()]
    optimizer = optimizer_class(params, **kwargs)
    for step in range(n):
        if step == resume_at:
            saved = copy.deepcopy(optimizer.state_dict())
            optimizer = optimizer_class(params, **kwargs)
            optimizer.load_state_dict(saved)
        optimizer.zero_grad(set_to_none=True)
        sum(((p - 0.1 * step) ** 2).sum() for p in params).backward()
        optimizer.step()
    return [p.detach().clone() for p in params], optimizer.state_dict()


@pytest.mark.parametrize("name", sorted(optim.OPTIMIZERS))
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_each_optimizer_updates_and_saves_as_torchs_own(name, fused):
    kwargs = BUILD[name] | {"fused": fused}
    ours, theirs = steps(optim.OPTIMIZERS[name], kwargs), steps(TORCH[name], kwargs)
    assert all(torch.equal(a, b) for a, b in zip(ours[0], theirs[0]))
    assert ours[1]["param_groups"] == theirs[1]["param_groups"]
    assert ours[1]["state"].keys() == theirs[1]["state"].keys()
    for index, entry in theirs[1]["state"].items():
        assert ours[1]["state"][index].keys() == entry.keys()
        assert all(torch.equal(ours[1]["state"][index][key], value) for key, value in entry.items()), index


def test_a_state_dict_of_torchs_optimizer_loads_into_ours_and_back():
    """Checkpoints written with torch.optim.Adam (before trainables/optim.py had its own classes) resume."""
    params = [torch.ones(3, requires_grad=True)]
    theirs = torch.optim.Adam(params, lr=0.1)
    params[0].sum().backward()
    theirs.step()
    ours = optim.Adam(params, lr=0.1)
    ours.load_state_dict(theirs.state_dict())
    assert torch.equal(ours.state_dict()["state"][0]["exp_avg"], theirs.state_dict()["state"][0]["exp_avg"])
    torch.optim.Adam(params, lr=0.1).load_state_dict(ours.state_dict())


def test_step_runs_without_grad_and_calls_its_hooks():
    """What torch's step wrapper and Optimizer's step hooks do around the update, ours does too."""
    param = torch.ones(2, requires_grad=True)
    optimizer, seen = optim.SGD([param], lr=1.0), []
    optimizer.register_step_pre_hook(lambda *_: seen.append(("pre", torch.is_grad_enabled())))
    optimizer.register_step_post_hook(lambda *_: seen.append(("post", torch.is_grad_enabled())))
    param.sum().backward()
    optimizer.step()
    assert seen == [("pre", True), ("post", True)] and torch.equal(param.detach(), torch.zeros(2))
    assert torch.is_grad_enabled()


TRAIN_WITHOUT_DYNAMO = """
import sys
from pathlib import Path
from trainables import config, train as train_module
from trainables.train import train, train_members
CONFIGS = Path("configs")
tiny = ["optim.max_steps=20", "eval.every=10", "eval.n_id=64", "eval.n_ood=64", "task.n_pairs_per_cell=1"]
train(config.load(CONFIGS / "debug_grid.yaml", []))  # the one-step model: SGD
train(config.load(CONFIGS / "debug.yaml", tiny))  # the transformer: Adam
cfgs = [config.load(CONFIGS / "debug.yaml", tiny + [f"seed={seed}"]) for seed in (0, 1)]  # packed: stacked Adam
states = {}
train_members(cfgs, [train_module.Logger() for _ in cfgs], [None, None],
              on_checkpoint=lambda staged: states.update({(i, s["step"]): s for i, s in staged.items()}))
train(cfgs[0], resume=states[(0, 10)])  # resumed: load_state_dict
print(sorted(name for name in sys.modules if name.startswith("torch._dynamo")))
"""


def test_training_imports_no_torch_dynamo():
    """A fresh interpreter (this one may have imported torch._dynamo for another test) trains the one-step model, the
    transformer alone, packed and resumed: torch._dynamo is never imported."""
    proc = subprocess.run([sys.executable, "-c", TRAIN_WITHOUT_DYNAMO], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout[-2000:]
