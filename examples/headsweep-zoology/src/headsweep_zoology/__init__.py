"""headsweep-zoology: a worked example of a headsweep plugin package.

- `mqar` (headsweep_zoology.mqar:TASK): multi-query associative recall (Arora et al. 2023, "Zoology"), with a
  diversity knob, `task.n_train_keys`: does recall generalize to keys never seen in training?
- `base_conv` (headsweep_zoology.base_conv:SPEC): a gated long-convolution model in the spirit of Zoology's BaseConv,
  a model without attention.

headsweep finds both through this package's entry points (groups `headsweep.tasks` and `headsweep.models`), so a
config names them `task.name: mqar` and `model.name: base_conv`; by module path (`task.name:
"headsweep_zoology.mqar:TASK"`) they work without installing the package too. Nothing is imported here, so loading
one entry point imports only its own module.
"""

__version__ = "0.1.0"
