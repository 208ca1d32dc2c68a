"""How the figures draw an arm: its colour, dash pattern, marker and width, its tick labels and its legend label.

Arms stay distinguishable where their lines coincide (one seed: PG and SC follow the same trajectory
until the first sampled token differs): each method has a fixed colour, dash pattern and marker
(pg blue solid circles, tis orange dashed squares, sc green dotted triangles, sc_tis red dash-dot
diamonds; other methods further tab10 colours), shared by every figure and by all seeds of the
method; methods are drawn in the sweep's order, each thinner and on top of the one before, so a line
drawn over another leaves it visible on both sides; markers are staggered along the curve. With
several seeds a method's seeds are thin solid lines of its colour (:data:`SEED_LINE`) under its mean.
"""

from __future__ import annotations

from matplotlib.ticker import MaxNLocator, ScalarFormatter

from analysis.load import Sweep

METHOD_COLORS = {"pg": "tab:blue", "tis": "tab:orange", "sc": "tab:green", "sc_tis": "tab:red"}
_EXTRA_COLORS = ["tab:purple", "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]
LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
METHOD_ORDER = ["pg", "tis", "sc", "sc_tis"]
#: Line width of the first, second, ... method drawn (each drawn over the ones before).
LINE_WIDTHS = [3.2, 2.4, 1.7, 1.1]
MARKER_SIZES = [8.0, 6.5, 5.0, 3.6]
#: Keywords of one seed's line under its method's mean (colour added per method).
SEED_LINE = {"linestyle": "-", "linewidth": 0.6, "alpha": 0.3, "zorder": 1.5}
#: Opacity of a method's band.
BAND_ALPHA = 0.12


def method_color(method: str, methods: list[str] | None = None) -> str:
    """The fixed colour of ``method`` (unknown methods take the next unused tab10 colour)."""
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    others = sorted(m for m in (methods or [method]) if m not in METHOD_COLORS)
    i = others.index(method) if method in others else 0
    return _EXTRA_COLORS[i % len(_EXTRA_COLORS)]


def method_style(method: str, methods: list[str]) -> dict:
    """Line keywords of ``method``: colour, dash pattern, marker, and a width and marker size that
    shrink with its drawing position in ``methods`` (drawn later = thinner and on top)."""
    known = [m for m in METHOD_ORDER if m in methods] + [m for m in methods if m not in METHOD_ORDER]
    fixed = METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER) + known.index(method)
    position = known.index(method) if method in known else 0
    return {"color": method_color(method, methods), "linestyle": LINESTYLES[fixed % len(LINESTYLES)],
            "marker": MARKERS[fixed % len(MARKERS)], "linewidth": LINE_WIDTHS[min(position, len(LINE_WIDTHS) - 1)],
            "markersize": MARKER_SIZES[min(position, len(MARKER_SIZES) - 1)], "zorder": 2 + position}


def markevery(n_points: int, position: int, n_methods: int, marks: int = 6) -> int | tuple[int, int]:
    """Every point for short curves; else about ``marks`` markers, staggered between methods."""
    if n_points <= 12:
        return 1
    every = max(n_points // marks, 1)
    return (position * every // max(n_methods, 1), every)


def plain_ticks(ax) -> None:
    """Tick labels as plain numbers: no offset (``1e-5+9.995e-1``) and no scientific multiplier; the
    x axis (training steps) at integers."""
    for axis in (ax.xaxis, ax.yaxis):
        formatter = ScalarFormatter(useOffset=False)
        formatter.set_scientific(False)
        axis.set_major_formatter(formatter)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def run_label(sweep: Sweep, run: str) -> str:
    """Legend label of a run: its name, plus its state when it is not finished."""
    r = sweep.runs.loc[run]
    if r["status"] == "running":
        return f"{run} (running, step {r['last_step']}/{r['total_steps']})"
    if r["status"] == "failed":
        return f"{run} (failed at step {r['last_step']})"
    return run


def method_label(sweep: Sweep, method: str, runs: list[str]) -> str:
    """Legend label of a method drawn from ``runs`` (its seeds in this panel), e.g. ``pg: mean of 16 seeds
    (1 running)``; with one run ``pg: 1 seed`` and that run's state."""
    status = sweep.runs.loc[runs, "status"]
    states = [f"{n} {state}" for state in ("running", "failed") if (n := int((status == state).sum()))]
    what = f"mean of {len(runs)} seeds" if len(runs) > 1 else "1 seed"
    return f"{method}: {what}" + (f" ({', '.join(states)})" if states else "")


def seed_runs(sweep: Sweep, runs: list[str]) -> dict[str, list[str]]:
    """``runs`` grouped by method, methods in the sweep's order, runs in the sweep's (seed) order."""
    method = sweep.runs["method"]
    groups: dict[str, list[str]] = {m: [] for m in sweep.methods}
    for run in runs:
        groups[method.at[run]].append(run)
    return {m: rs for m, rs in groups.items() if rs}


#: Arms a figure draws with every seed's line; with more, each arm is its mean and a fainter band only
#: (eight arms x seventeen seeds would be 136 lines under the means).
SEED_LINES_MAX_ARMS = 4


def seed_lines(sweep: Sweep) -> bool:
    """Whether the figures draw one thin line per seed (several seeds, at most :data:`SEED_LINES_MAX_ARMS` arms)."""
    return several_seeds(sweep) and len(sweep.methods) <= SEED_LINES_MAX_ARMS


def band_alpha(sweep: Sweep) -> float:
    """The bands' opacity: :data:`BAND_ALPHA`, halved beyond :data:`SEED_LINES_MAX_ARMS` arms (the bands overlap)."""
    return BAND_ALPHA if len(sweep.methods) <= SEED_LINES_MAX_ARMS else BAND_ALPHA / 2


def several_seeds(sweep: Sweep) -> bool:
    """Whether some method of ``sweep`` has two or more runs (the figures then draw means, bands and seeds)."""
    return bool((sweep.runs["method"].value_counts() > 1).any())
