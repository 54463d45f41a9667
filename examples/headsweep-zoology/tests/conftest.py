"""The example's tests import the package from src/ (this checkout), ahead of any installed copy, so they test the
code as edited; headsweep's registries then import the same modules through the installed entry points or a module
path."""
import os
import sys
from pathlib import Path

os.environ["WANDB_MODE"] = "offline"  # a developer logged in to W&B must not send test runs online
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
