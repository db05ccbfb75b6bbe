"""``gate localize``'s reports: the console table, the per-layer sensitivity plot, the HTML page.

The plot (PNG, also embedded in the HTML page) has one bar per decoder layer
in layer order: the combined swap-back score (the mean recovered share of
the loss signals, :mod:`gate.localize.attribution`), layers kept by the
repair in red, layers known only through their block hatched; the layerwise
divergence (relative hidden-state error) is drawn over it on a second axis.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from rich.table import Table

from gate.localize.result import LayerScore, Localization
from gate.report.html import esc
from gate.report.plots import DPI, to_data_uri

KEPT_COLOUR = "#c62828"
OTHER_COLOUR = "#5c6bc0"
DIVERGENCE_COLOUR = "#ef8f00"


def _share(value: float | None) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:+.2f}"


def console_table(result: Localization, top: int = 10) -> Table:
    """The ranked layers (the first ``top``) with their scores."""
    table = Table(title=f"Layers ranked by recovered loss (swap-back on {result.subset} prompts)")
    for column in ("rank", "layer", "score", "CGA share", "top-5 share", "KL share", "divergence"):
        table.add_column(column, justify="left" if column == "layer" else "right")
    for rank, layer in enumerate(result.layers[:top], start=1):
        name = layer.name + (" (block)" if layer.resolution == "block" else "")
        table.add_row(
            str(rank),
            name,
            f"{layer.score:.3f}",
            _share(layer.shares.get("cga")),
            _share(layer.shares.get("top5")),
            _share(layer.shares.get("kl")),
            f"{layer.divergence:.4f}",
        )
    return table


def localization_summary_lines(result: Localization) -> list[str]:
    """The lines printed under the table: losses, subset, repair, cost."""
    losses = result.losses
    lines = [
        f"candidate losses on {result.prompts} prompts: CGA {1 - losses['cga']:.3f},"
        f" CGA@5 {1 - losses['top5']:.3f}, KL {losses['kl']:.4f} nats/token",
        f"swap subset: {result.subset} of {result.prompts} prompts, resolves a recovered share of"
        f" {result.resolvable_share:.2f} of the KL loss (asked {result.resolve:.2f}; alpha 0.05,"
        " power 0.8)",
    ]
    if result.repair is not None:
        lines.append(f"repair: {result.repair.headline()}")
        if result.repair.recipe is not None:
            lines.append(f"recipe: {result.repair.recipe}")
        lines.extend(f"  {tool}: {text}" for tool, text in result.repair.snippets.items())
    lines.append(f"cost: {result.forwards} forwards, {result.swaps} swaps, {result.wall_s:.1f} s")
    return lines


def sensitivity_figure(result: Localization) -> Figure:
    """The per-layer sensitivity plot (module doc)."""
    layers: Sequence[LayerScore] = sorted(result.layers, key=lambda layer: layer.index)
    kept = set(result.repair.kept) if result.repair is not None else set()
    fig = Figure(figsize=(max(6.0, 0.28 * len(layers) + 2.0), 3.4), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    x = [layer.index for layer in layers]
    bars = ax.bar(
        x,
        [layer.score for layer in layers],
        color=[KEPT_COLOUR if layer.index in kept else OTHER_COLOUR for layer in layers],
    )
    for bar, layer in zip(bars, layers, strict=True):
        if layer.resolution == "block":
            bar.set_hatch("//")
    step = 1 if len(x) <= 32 else 2
    ax.set_xticks(x[::step])
    ax.set_xlabel("decoder layer")
    ax.set_ylabel("recovered share (score)")
    ax.axhline(0.0, color="#424242", linewidth=0.6)
    twin = ax.twinx()
    twin.plot(x, [layer.divergence for layer in layers], color=DIVERGENCE_COLOUR, marker=".")
    twin.set_ylabel("relative hidden-state error", color=DIVERGENCE_COLOUR)
    ax.set_title(
        "Per-layer sensitivity: swap-back score (bars; red: kept), divergence (line)",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def png_bytes(result: Localization) -> bytes:
    """The sensitivity plot as PNG bytes."""
    buffer = io.BytesIO()
    sensitivity_figure(result).savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def html_page(result: Localization) -> str:
    """A self-contained HTML page: summary, plot, ranked table, snippets."""
    rows = "".join(
        f"<tr><td>{rank}</td><td>{esc(layer.name)}</td><td>{layer.score:.3f}</td>"
        f"<td>{_share(layer.shares.get('cga'))}</td><td>{_share(layer.shares.get('top5'))}</td>"
        f"<td>{_share(layer.shares.get('kl'))}</td><td>{layer.divergence:.4f}</td>"
        f"<td>{esc(layer.resolution)}</td></tr>"
        for rank, layer in enumerate(result.layers, start=1)
    )
    summary = "".join(f"<li>{esc(line)}</li>" for line in localization_summary_lines(result))
    image = to_data_uri(sensitivity_figure(result))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>gate localize</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}</style></head><body>"
        f"<h1>gate localize: {esc(result.candidate.get('recipe') or result.candidate.get('model'))}"
        f" against {esc(result.baseline)}</h1><ul>{summary}</ul>"
        f"<img alt='per-layer sensitivity' src='{image}'>"
        "<table><tr><th>rank</th><th>layer</th><th>score</th><th>CGA share</th>"
        "<th>top-5 share</th><th>KL share</th><th>divergence</th><th>resolution</th></tr>"
        f"{rows}</table></body></html>"
    )


__all__ = [
    "console_table",
    "html_page",
    "localization_summary_lines",
    "png_bytes",
    "sensitivity_figure",
]
