"""podracer's PPO next to Stable-Baselines3's and skrl's, on the same trading env, in one process.

On one planted-signal synthetic market (``data.synthetic``) with the same env settings, each
library trains PPO for the same env-step budget, once per seed:

- **podracer**: ``agents.ppo.train`` on :class:`envs.vec_env.TradingVecEnv` (its default per-asset
  actor-critic, softmax-over-assets actions);
- **sb3**: ``stable_baselines3.PPO("MlpPolicy", ...)`` through :class:`envs.sb3.SB3VecEnv` (numpy at
  the boundary) under SB3's ``VecNormalize`` (observations only);
- **skrl**: skrl's PPO through ``wrap_env(envs.isaaclab.IsaacLabEnv(env), wrapper="isaaclab")``
  (tensors, no copies) with its ``RunningStandardScaler`` on observations.

Same PPO hyper-parameters everywhere (podracer's defaults: 32 steps per rollout, 4 epochs of 4
minibatches, lr 3e-3, gamma = lambda = 0.9, clip 0.2 on ratio and value, grad-norm 0.5, no entropy
bonus, initial log-std -0.5; the value-loss weights are converted so every library minimises
0.25 x MSE). The peers get two tanh MLPs (actor and critic, two hidden layers of width ``h``) with ``h``
chosen so that their parameter count is closest to podracer's network; their actions are a
Gaussian over the env's ``Box(0, 1)`` target weights (what a user of those libraries gets out of
the box): SB3 clips the samples to the box, skrl sends them raw and the env clips them (negative
weights to 0, rows summing above 1 scaled down); both keep the raw sample's log-probability.

Reported per library (mean over seeds, and per seed): ``env_steps_per_s`` of the whole training
loop (rollouts + updates, wall clock of the library's train call) and ``valid_sharpe``, the
annualized Sharpe of daily returns (net of costs) of the trained policy's deterministic actions on
the validation window, scored by ``backtests.scoring`` exactly as the tournament scores pods.

    .venv/bin/python benchmarks/vs_peers.py                      # README figures (a few minutes, 2 cores)
    .venv/bin/python benchmarks/vs_peers.py --json               # one JSON row per library
    .venv/bin/python benchmarks/vs_peers.py --quick              # smoke run (seconds)

Needs the ``peers`` extra (``pip install -e '.[peers]'``: stable-baselines3, skrl).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from agents.networks import flops_per_sample, num_parameters  # noqa: E402
from agents.ppo import PPOArgs, train  # noqa: E402
from agents.training import policy_for_env  # noqa: E402
from backtests.metrics import TRADING_DAYS_PER_YEAR
from backtests.scoring import score_window  # noqa: E402
from data.loader import synthetic_market  # noqa: E402
from data.market import MarketData  # noqa: E402
from envs.isaaclab import IsaacLabEnv  # noqa: E402
from envs.sb3 import SB3VecEnv  # noqa: E402  (needs stable-baselines3: a one-line error without it)
from envs.trading import EnvParams  # noqa: E402
from envs.vec_env import TradingVecEnv  # noqa: E402

LIBRARIES = ("podracer", "sb3", "skrl")
#: podracer's PPO defaults, shared by every library (see the module docstring).
PPO = PPOArgs()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tickers", type=int, default=20)
    p.add_argument("--sessions", type=int, default=40)
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--budget-steps", type=int, default=196_608, help="env-steps of training per run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=LIBRARIES)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--json", action="store_true", help="one JSON row per library")
    p.add_argument("--quick", action="store_true", help="tiny sizes: check that the script runs")
    args = p.parse_args(argv)
    if args.quick:
        args.tickers, args.sessions, args.num_envs, args.budget_steps, args.seeds = 3, 10, 8, 1024, [0]
    return args


def env_params() -> EnvParams:
    return EnvParams(decision_interval=15, episode_len=64, reward_scale=100.0)


def peer_width(target: int, obs_dim: int, num_actions: int) -> int:
    """Hidden width ``h`` of the peers' actor + critic MLPs (2 hidden layers each, plus a log-std
    per action) whose parameter count is closest to ``target``."""

    def count(h: int) -> int:
        actor = obs_dim * h + h + h * h + h + h * num_actions + num_actions + num_actions
        critic = obs_dim * h + h + h * h + h + h + 1
        return actor + critic

    return min(range(2, 1025), key=lambda h: abs(count(h) - target))


def peer_macs(width: int, obs_dim: int, num_actions: int) -> int:
    """Multiply-adds of one actor + critic forward pass per observation of the peers' MLPs."""
    trunk = obs_dim * width + width * width
    return 2 * trunk + width * num_actions + width


def _sharpe(valid: MarketData, params: EnvParams, policy: Callable[[torch.Tensor], torch.Tensor]) -> float:
    with torch.no_grad():
        return score_window(
            valid, params, {"policy": policy}, nan_value=0.0, annualization=TRADING_DAYS_PER_YEAR
        ).of("policy")


# --- the three trainers: each returns (env-steps, train seconds, deterministic policy, parameters) ---


def run_podracer(train_market, params, args, seed, _width):
    env = TradingVecEnv(train_market, params, num_envs=args.num_envs, device=args.device, seed=seed)
    ppo = PPOArgs(seed=seed, total_steps=args.budget_steps, eval_every=10**12)
    start = time.perf_counter()
    result = train(ppo, env)
    seconds = time.perf_counter() - start
    return result.env_steps, seconds, result.policy, num_parameters(result.policy.net)


def run_sb3(train_market, params, args, seed, width):
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.vec_env import VecNormalize

    env = TradingVecEnv(train_market, params, num_envs=args.num_envs, device=args.device, seed=seed)
    venv = VecNormalize(SB3VecEnv(env), norm_obs=True, norm_reward=False, clip_obs=1e6)
    rollout = PPO.num_steps * args.num_envs
    model = SB3PPO(
        "MlpPolicy",
        venv,
        learning_rate=PPO.learning_rate,
        n_steps=PPO.num_steps,
        batch_size=rollout // PPO.num_minibatches,
        n_epochs=PPO.update_epochs,
        gamma=PPO.gamma,
        gae_lambda=PPO.gae_lambda,
        clip_range=PPO.clip_coef,
        clip_range_vf=PPO.clip_coef,
        ent_coef=PPO.ent_coef,
        vf_coef=PPO.vf_coef * 0.5,  # SB3: vf_coef * MSE; CleanRL/podracer: vf_coef * 0.5 * MSE
        max_grad_norm=PPO.max_grad_norm,
        policy_kwargs={
            "net_arch": {"pi": [width, width], "vf": [width, width]},
            "log_std_init": PPO.init_log_std,
        },
        seed=seed,
        device=args.device,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=args.budget_steps)
    seconds = time.perf_counter() - start
    venv.training = False

    def policy(obs: torch.Tensor) -> torch.Tensor:
        action, _ = model.predict(venv.normalize_obs(obs.cpu().numpy()), deterministic=True)
        return torch.as_tensor(action, dtype=torch.float32, device=obs.device)

    return model.num_timesteps, seconds, policy, num_parameters(model.policy)


def run_skrl(train_market, params, args, seed, width):
    from skrl.agents.torch.ppo import PPO as SkrlPPO
    from skrl.agents.torch.ppo import PPO_CFG
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.memories.torch import RandomMemory
    from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
    from skrl.resources.preprocessors.torch import RunningStandardScaler
    from skrl.trainers.torch import SequentialTrainer
    from skrl.utils import set_seed

    def mlp(n_in: int, n_out: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Linear(n_in, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, n_out)
        )

    class Actor(GaussianMixin, Model):
        def __init__(self, observation_space, action_space, device):
            Model.__init__(
                self, observation_space=observation_space, action_space=action_space, device=device
            )
            # Raw samples go to the env (which clips negative weights to 0 and scales rows above 1),
            # and their log-probabilities stay those of the raw sample, as in SB3. skrl's
            # clip_actions=True would score the clipped sample instead: with a mean outside [0, 1]
            # its log-probability explodes and training went NaN within 200k env-steps (seed 0).
            GaussianMixin.__init__(self, clip_actions=False)
            self.net = mlp(self.num_observations, self.num_actions)
            self.log_std = nn.Parameter(torch.full((self.num_actions,), PPO.init_log_std))

        def compute(self, inputs, role):
            return self.net(inputs["observations"]), {"log_std": self.log_std}

    class Critic(DeterministicMixin, Model):
        def __init__(self, observation_space, action_space, device):
            Model.__init__(
                self, observation_space=observation_space, action_space=action_space, device=device
            )
            DeterministicMixin.__init__(self)
            self.net = mlp(self.num_observations, 1)

        def compute(self, inputs, role):
            return self.net(inputs["observations"]), {}

    set_seed(seed)
    native = TradingVecEnv(train_market, params, num_envs=args.num_envs, device=args.device, seed=seed)
    env = wrap_env(IsaacLabEnv(native), wrapper="isaaclab", verbose=False)
    models = {
        "policy": Actor(env.observation_space, env.action_space, env.device),
        "value": Critic(env.observation_space, env.action_space, env.device),
    }
    cfg = PPO_CFG(
        rollouts=PPO.num_steps,
        learning_epochs=PPO.update_epochs,
        mini_batches=PPO.num_minibatches,
        discount_factor=PPO.gamma,
        gae_lambda=PPO.gae_lambda,
        learning_rate=PPO.learning_rate,
        grad_norm_clip=PPO.max_grad_norm,
        ratio_clip=PPO.clip_coef,
        value_clip=PPO.clip_coef,
        entropy_loss_scale=PPO.ent_coef,
        value_loss_scale=PPO.vf_coef * 0.5,  # skrl: scale * MSE
        observation_preprocessor=RunningStandardScaler,
        observation_preprocessor_kwargs={"size": env.observation_space, "device": env.device},
    )
    cfg.experiment.write_interval = 0
    cfg.experiment.checkpoint_interval = 0
    agent = SkrlPPO(
        models=models,
        memory=RandomMemory(memory_size=PPO.num_steps, num_envs=env.num_envs, device=env.device),
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=env.device,
        cfg=cfg,
    )
    timesteps = args.budget_steps // args.num_envs
    trainer = SequentialTrainer(
        env=env,
        agents=agent,
        cfg={
            "timesteps": timesteps,
            "headless": True,
            "disable_progressbar": True,
            "close_environment_at_exit": False,
        },
    )
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    actor, scaler = models["policy"], agent._observation_preprocessor

    def policy(obs: torch.Tensor) -> torch.Tensor:
        _, out = actor.act({"observations": scaler(obs)}, role="policy")
        return out["mean_actions"]  # the env clips it, as it clipped the training samples

    params_count = num_parameters(models["policy"]) + num_parameters(models["value"])
    return timesteps * args.num_envs, seconds, policy, params_count


RUNNERS = {"podracer": run_podracer, "sb3": run_sb3, "skrl": run_skrl}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    splits = synthetic_market(
        num_tickers=args.tickers, num_sessions=args.sessions, seed=0, device=args.device
    )
    params = env_params()
    probe = TradingVecEnv(splits.train, params, num_envs=1, device=args.device)
    podracer_params = num_parameters(policy_for_env(None, probe, PPO, "ppo")[0].net)
    width = peer_width(podracer_params, probe.obs_dim, probe.action_dim)
    macs = {
        "podracer": flops_per_sample(policy_for_env(None, probe, PPO, "ppo")[0].net.config)["total"],
        "sb3": peer_macs(width, probe.obs_dim, probe.action_dim),
        "skrl": peer_macs(width, probe.obs_dim, probe.action_dim),
    }
    if not args.json:
        print(
            f"# torch {torch.__version__}, {platform.processor() or platform.machine()}, device {args.device}, "
            f"{args.threads} thread(s); {args.tickers} tickers x {args.sessions} sessions, "
            f"{args.num_envs} envs, {args.budget_steps:,} env-steps per run, seeds {args.seeds}; "
            f"podracer net {podracer_params:,} params, peers' MLP width {width}",
            flush=True,
        )
    with torch.no_grad():
        bh = score_window(
            splits.valid,
            params,
            {},
            nan_value=0.0,
            baselines=("buy_and_hold",),
            annualization=TRADING_DAYS_PER_YEAR,
        )
    buy_and_hold = bh.of("buy_and_hold")
    if not args.json:
        print(f"# equal-weight buy-and-hold, validation Sharpe {buy_and_hold:.2f}", flush=True)
    # Untimed warm-up of each library (first-call allocations, lazy imports), then seeds in the
    # outer loop with the libraries' order rotated per seed, so machine-load drift during the run is
    # spread over all of them rather than landing on whichever runs first or last.
    warm = argparse.Namespace(**{**vars(args), "budget_steps": 2 * PPO.num_steps * args.num_envs})
    for library in args.libraries:
        RUNNERS[library](splits.train, params, warm, 0, width)
    runs: dict[str, list[dict]] = {library: [] for library in args.libraries}
    n_params: dict[str, int] = {}
    for i, seed in enumerate(args.seeds):
        order = args.libraries[i % len(args.libraries) :] + args.libraries[: i % len(args.libraries)]
        for library in order:
            steps, seconds, policy, n_params[library] = RUNNERS[library](
                splits.train, params, args, seed, width
            )
            sharpe = _sharpe(splits.valid, params, policy)
            runs[library].append(
                {"seed": seed, "env_steps": steps, "seconds": seconds, "valid_sharpe": sharpe}
            )
            if not args.json:
                print(
                    f"  {library:8s} seed {seed}: {steps:,} env-steps in {seconds:6.1f} s "
                    f"({steps / seconds:8,.0f}/s), valid Sharpe {sharpe:6.2f}",
                    flush=True,
                )
    rows = []
    for library in args.libraries:
        sharpes = [r["valid_sharpe"] for r in runs[library]]
        rows.append(
            {
                "library": library,
                "env_steps_per_s": statistics.mean(r["env_steps"] / r["seconds"] for r in runs[library]),
                "valid_sharpe": statistics.mean(sharpes),
                "valid_sharpe_std": statistics.stdev(sharpes) if len(sharpes) > 1 else 0.0,
                "parameters": n_params[library],
                "macs_per_sample": macs[library],
                "valid_sharpe_buy_and_hold": buy_and_hold,
                "num_envs": args.num_envs,
                "budget_steps": args.budget_steps,
                "seeds": args.seeds,
                "runs": runs[library],
            }
        )
    base = next((r for r in rows if r["library"] == "podracer"), None)
    for row in rows:
        if base is not None:
            row["speed_vs_podracer"] = row["env_steps_per_s"] / base["env_steps_per_s"]
        if args.json:
            print(json.dumps(row))
        else:
            ratio = f"  ({row['speed_vs_podracer']:.2f}x podracer's speed)" if base is not None else ""
            print(
                f"{row['library']:8s} {row['env_steps_per_s']:9,.0f} env-steps/s{ratio}, valid Sharpe "
                f"{row['valid_sharpe']:6.2f} +- {row['valid_sharpe_std']:.2f} over {len(args.seeds)} seed(s), "
                f"{row['parameters']:,} params, {row['macs_per_sample']:,} MACs/sample"
            )
    if any(not math.isfinite(r["valid_sharpe"]) for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
