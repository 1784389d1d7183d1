"""The env step's fast backends: :mod:`~envs.backends.native` (the C kernel on CPU) and
:mod:`~envs.backends.compiled` (``torch.compile``). The rules they run live in :mod:`envs.core` and
:mod:`envs.trading`; :mod:`envs.fast_step` chooses between them. Nothing here imports those modules."""
