"""`podracer export RUN [--pod ID] --format onnx [--out DIR] [--torchscript]`."""

from __future__ import annotations

from pathlib import Path

import typer

from app import context
from data.errors import ConfigError


def export(
    run: str = typer.Argument(..., help="Run id (under <home>/runs) or path to a run directory."),
    pod: str = typer.Option(None, "--pod", help="Export this pod instead of the run's champion."),
    fmt: str = typer.Option("onnx", "--format", help="Bundle format (onnx)."),
    out: Path = typer.Option(None, "--out", help="Bundle directory \\[default: <home>/exports/<run>-<pod>]."),
    torchscript: bool = typer.Option(False, "--torchscript", help="Also write a TorchScript policy.pt."),
    exporter: str = typer.Option(
        "dynamo",
        "--exporter",
        help="ONNX exporter: dynamo (torch.export, default) or torchscript (legacy, fast).",
    ),
) -> None:
    """Export a trained policy to an onnxruntime bundle (policy.onnx + manifest.json), parity-checked."""
    # Imported here, not at module top: they load torch, which `podracer --help` must not (app.commands).
    from app.bundle import load_bundle
    from app.export import export_bundle, resolve_run_dir

    if fmt != "onnx":
        raise ConfigError(f"--format {fmt!r} is not supported (onnx)")
    run_dir = resolve_run_dir(run, context.home())
    bundle_dir = export_bundle(
        run_dir, pod=pod, out=out, torchscript=torchscript, exporter=exporter, home=context.home()
    )
    bundle = load_bundle(bundle_dir)  # verify what was written, as paper trading will
    parity = bundle.manifest["parity"]
    context.console.print(
        f"exported {bundle_dir}\n"
        f"  tickers: {', '.join(bundle.tickers)}  interval: {bundle.interval}  "
        f"decision interval: {bundle.decision_interval} bars\n"
        f"  parity onnxruntime vs torch: max abs diff {parity['max_abs_diff']:.3g} "
        f"(tolerance {parity['tolerance']:g}, {parity['num_obs']} observations)\n"
        f"  bundle id: {bundle.bundle_id[:16]}",
        highlight=False,
    )
