"""The env step's fast kernels: :mod:`~envs.kernels.native` (the C kernel on CPU) and
:mod:`~envs.kernels.compiled` (``torch.compile``). The rules they run live in :mod:`envs.core` and
:mod:`envs.trading`; :mod:`envs.fast_step` chooses between them. Nothing here imports those modules."""
