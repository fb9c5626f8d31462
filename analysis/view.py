"""`pcnlab view RUN`: one self-contained HTML file (Bokeh, its JavaScript inlined; opens offline, no
server) to look at a run, or at a sweep's runs side by side.

Per run, a column whose plots share one time axis (seconds on the host clock from the run's first
record): the queue at the switch port picked above the plots, met on arrival and left at departure,
CE marks, early drops, pcn-host announcements, the controller's pcn windows and the spans the switch
held K_pre; each process's iterations from its own log; the background flows' throughput. Above
them, a box that moves every run's axis to iteration N. What is thinned and what never is:
analysis/view_data.py.
"""

from __future__ import annotations

import html
import time
from pathlib import Path

from bokeh.embed import components
from bokeh.layouts import column, row
from bokeh.models import (ColumnDataSource, CustomJS, Div, HoverTool, Legend, Range1d, Select, Span, TextInput)
from bokeh.plotting import figure
from bokeh.resources import Resources

from pcnlab.errors import UsageError
from pcnlab.files import give_back
from pcnlab.analysis.view_data import Decimation, PortView, RunView, run_view
from pcnlab.analysis.results import RunData, run_folders
from pcnlab.status import is_run_folder

VIEW_FILE = "view.html"
# Bokeh's JavaScript, inlined: its core and its widgets (the jump box); neither MathJax, WebGL nor tables.
RESOURCES = ("bokeh", "bokeh-widgets")
TOOLS = "xpan,xwheel_zoom,box_zoom,reset,save"
COLOURS = {"enq": "#555555", "deq": "#1f77b4", "marked": "#d62728", "dropped": "black", "announced": "#9467bd",
           "window": "#2ca02c", "held": "#ff7f0e", "K": "#d62728", "K_pre": "#ff7f0e", "queue": "black"}
POINT_TIPS = [("t", "@t{0.000000} s"), ("queue", "@depth pkts"), ("seq", "@seq"), ("class", "@class"),
              ("job", "@job"), ("from", "@src"), ("to", "@dst")]
# The view's hand-written JavaScript, two snippets (Bokeh has no built-in "go to" for a range): move each
# run's time axis to its iteration N, from 10 ms before its first process started it to 10 ms after its
# last one ended it.
JUMP_JS = """
const n = parseInt(cb_obj.value);
for (let i = 0; i < ranges.length; i++) {
  const k = iters[i].indexOf(n);
  if (k >= 0) { ranges[i].setv({start: starts[i][k] - 0.01, end: ends[i][k] + 0.01}); }
}
"""
# And the port picker's: show the renderers of the port picked (each tagged with its port's label).
PICK_JS = "for (const r of renderers) { r.visible = r.tags[0] === cb_obj.value; }"


def _source(frame, name: str, **extra) -> ColumnDataSource:
    """A data source of a table's columns as plain arrays (strings as objects: Bokeh does not serialise
    pandas' Arrow strings), named so a test can find it in the page (tests/experiments/test_view_bmv2.py)."""
    return ColumnDataSource({c: frame[c].to_numpy() for c in frame.columns}, name=name, **extra)


def _port_glyphs(fig: figure, port: PortView, view: RunView, top: float, shown: bool) -> dict[str, list]:
    """Draw one port's series, windows and marked packets on `fig` (visible when `shown`); its renderers
    by legend label, each tagged with the port's label (what the port picker switches on)."""
    lane = 0.08 * top
    tags = [port.label]
    out: dict[str, list] = {}
    for name, label in (("enq", "met on arrival"), ("deq", "left at departure")):
        out[label] = [fig.line("t", "depth", source=_source(getattr(port, name), name, tags=[view.name, *tags]),
                               color=COLOURS[name], line_width=1, alpha=1.0 if name == "enq" else 0.7,
                               visible=shown)]
    for name, label, lo, hi in (("windows", "pcn window (controller)", -1.2 * lane, -0.3 * lane),
                                ("held", "K_pre held (switch flags)", -2.4 * lane, -1.5 * lane)):
        source = _source(getattr(port, name).assign(bottom=lo, top=hi), name, tags=[view.name, *tags])
        colour = COLOURS["window" if name == "windows" else "held"]
        bars = fig.quad(left="left", right="right", bottom="bottom", top="top", source=source, color=colour,
                        alpha=0.6, visible=shown)
        shade = fig.quad(left="left", right="right", bottom=0, top=top * 1.08, source=source, color=colour,
                         alpha=0.08, line_alpha=0, visible=shown)
        out[label] = [bars, shade]
        if name == "windows":
            fig.add_tools(HoverTool(renderers=[bars], tooltips=[("window", "@left{0.000000} to @right{0.000000} s"),
                                                                ("job", "@job"), ("armed at", "@armed{0.000000} s"),
                                                                ("removed at", "@removed{0.000000} s")]))
    markers = {"marked": ("x", 7, "CE marked"), "dropped": ("x", 10, "dropped early"),
               "announced": ("triangle", 8, "pcn-host announcement")}
    for name, (marker, size, label) in markers.items():
        glyph = fig.scatter("t", "depth", source=_source(getattr(port, name), name, tags=[view.name, *tags]),
                            marker=marker, size=size, color=COLOURS[name], line_width=1.5, visible=shown)
        fig.add_tools(HoverTool(renderers=[glyph], tooltips=[("what", label), *POINT_TIPS]))
        out[label] = [glyph]
    for renderer in (r for rs in out.values() for r in rs):
        renderer.tags = tags        # on the renderer (a glyph method's tags= would go to the glyph)
    return out


def _queue_figure(view: RunView, x_range: Range1d, width: int, shown: str) -> tuple[figure, list]:
    """The queue at every port of the run in one plot, the port `shown` visible (the others are switched
    on by the port picker); a lane below zero holds the windows. Returns the plot and its per-port
    renderers."""
    top = max([int(p.enq["depth"].max()) for p in view.ports if len(p.enq)] + [*view.thresholds.values(), 1])
    fig = figure(height=360, width=width, x_range=x_range, y_range=Range1d(-0.21 * top, top * 1.2),
                 tools=TOOLS, active_scroll="xwheel_zoom", name="queue",
                 title=f"{view.name} ({view.mode}): the queue at the port picked above")
    fig.xaxis.axis_label = "time (s, host clock, from the run's first record)"
    fig.yaxis.axis_label = "queue (packets)"
    items: dict[str, list] = {}
    for port in view.ports:
        for label, renderers in _port_glyphs(fig, port, view, top, port.label == shown).items():
            items.setdefault(label, []).extend(renderers)
    for name, level in view.thresholds.items():
        fig.add_layout(Span(location=level, dimension="width", line_color=COLOURS.get(name, "black"),
                            line_dash="dashed" if name != "queue" else "solid", line_width=1))
    # Clicking a legend entry mutes it ("hide" would show every port's renderers of that entry).
    fig.add_layout(Legend(items=list(items.items()), click_policy="mute", label_text_font_size="8pt",
                          location="top_left", orientation="horizontal", ncols=4, background_fill_alpha=0.7, spacing=8,
                          padding=4, margin=4))
    return fig, [r for rs in items.values() for r in rs]


def _iteration_figure(view: RunView, x_range: Range1d, width: int) -> figure:
    """Each process's iterations (communication start to end, from its own log), one row per process."""
    who = sorted(view.iterations["who"].unique()) or ["(no iterations logged)"]
    neck = f" --switch {view.neck[0]} --port {view.neck[1]}" if view.neck else ""
    source = _source(view.iterations.assign(command=[f"pcnlab queues {view.path}{neck} --around-iteration {n}"
                                                     for n in view.iterations["iter"]]), "iterations")
    fig = figure(height=60 + 28 * len(who), width=width, x_range=x_range, y_range=who, tools=TOOLS,
                 active_scroll="xwheel_zoom", title="iterations (each process's log: communication start to end)")
    bars = fig.hbar(y="who", left="start", right="end", height=0.7, source=source, color="#6fa8dc",
                    line_color="navy")
    fig.add_tools(HoverTool(renderers=[bars], tooltips=[("", "@who iteration @iter"),
                                                        ("start", "@start{0.000000} s"), ("end", "@end{0.000000} s"),
                                                        ("every record around it", "@command")]))
    return fig


def _flow_figure(view: RunView, x_range: Range1d, width: int) -> figure:
    fig = figure(height=160, width=width, x_range=x_range, tools=TOOLS, active_scroll="xwheel_zoom",
                 title="background throughput (Mbit/s, per receiver interval)")
    for flow, rows in view.flows.groupby("flow"):
        fig.step(x="end", y="mbps", mode="before", source=_source(rows, "flow"), legend_label=str(flow))
    return fig


def run_column(view: RunView, width: int, shown: str) -> tuple[column, Range1d, list]:
    """One run's plots, their time axes one range; and its queue renderers (for the port picker)."""
    x_range = Range1d(0, max(view.duration_s, 1e-3), bounds=(-0.5, view.duration_s + 0.5), name="time")
    parts, renderers = [], []
    if view.ports:
        fig, renderers = _queue_figure(view, x_range, width, shown)
        parts.append(fig)
    else:
        parts.append(Div(text="<p>no queue log in this run</p>"))
    parts.append(_iteration_figure(view, x_range, width))
    if not view.flows.empty:
        parts.append(_flow_figure(view, x_range, width))
    return column(*parts), x_range, renderers


def _banner(view: RunView) -> str:
    """The line above a run's plots: what it is, and whether its numbers can be trusted."""
    d = view.decimation
    facts = (f"{html.escape(view.name)}: mode {html.escape(view.mode)}, {html.escape(view.status)}, "
             f"{sum(p.records for p in view.ports)} queue records, {sum(len(p.marked) for p in view.ports)} marked, "
             f"{sum(len(p.dropped) for p in view.ports)} dropped, {sum(len(p.windows) for p in view.ports)} pcn windows")
    if view.trusted is False:
        reasons = "; ".join(html.escape(r) for r in view.reasons) or "no reason given"
        return (f'<div class="untrusted"><b>UNTRUSTED run: its fidelity check failed</b> ({reasons}). '
                f'Its numbers are not the experiment\'s. {facts}</div>')
    verdict = "trusted" if view.trusted else "fidelity not checked"
    return f'<div class="run">{facts}; {verdict}. Thinned: per {d.bins} time bins the queue\'s extremes; ' \
           f'every record from {d.detail_before_ms:g} ms before to {d.detail_after_ms:g} ms after each iteration ' \
           'start and window opening; every mark, drop, announcement, window and iteration.</div>'


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
{resources}
<style>
body {{ font-family: sans-serif; margin: 8px; }}
header div {{ margin: 2px 0; font-size: 13px; }}
.untrusted {{ background: #fdd; border: 2px solid #c00; padding: 6px; color: #900; }}
</style>
</head>
<body>
<header id="pcnlab-header">
{banners}
</header>
{div}
{script}
</body>
</html>
"""


def render(views: list[RunView], title: str) -> str:
    """The page: a banner per run (untrusted ones first, in red), the jump box, the runs side by side."""
    width = 1300 if len(views) == 1 else 640
    labels = list(dict.fromkeys(p.label for v in views for p in sorted(v.ports, key=lambda p: (p.switch, p.port) != v.neck)))
    shown = labels[0] if labels else ""
    columns, ranges, renderers = zip(*(run_column(v, width, shown) for v in views))
    jump = TextInput(title="jump to iteration", placeholder="N, then Enter", width=160, name="jump")
    jump.js_on_change("value", CustomJS(args=dict(ranges=list(ranges),
                                                  iters=[v.jumps["iter"].astype(int).tolist() for v in views],
                                                  starts=[v.jumps["start"].tolist() for v in views],
                                                  ends=[v.jumps["end"].tolist() for v in views]), code=JUMP_JS))
    picker = Select(title="switch and port", options=labels, value=shown, width=160, name="port")
    picker.js_on_change("value", CustomJS(args=dict(renderers=[r for rs in renderers for r in rs]), code=PICK_JS))
    grid = column(*[row(*columns[i:i + 2]) for i in range(0, len(columns), 2)])
    script, div = components(column(row(picker, jump), grid))
    ordered = sorted(views, key=lambda v: v.trusted is not False)
    return PAGE.format(title=html.escape(title), resources=Resources(mode="inline", components=list(RESOURCES)).render(), banners="\n".join(map(_banner, ordered)),
                       div=div, script=script)


def write_view(path: Path | str, out: Path | str | None = None, decimation: Decimation = Decimation(),
               say=print) -> Path:
    """`pcnlab view`: the view of a run folder (written to its view.html) or of every run of a sweep
    (the sweep folder's view.html); `out` elsewhere."""
    path = Path(path)
    started = time.monotonic()
    runs = run_folders(path)
    if is_run_folder(path):
        target = path / VIEW_FILE
    else:
        parents = {p.parent for p in runs}
        target = (parents.pop() if len(parents) == 1 else path) / VIEW_FILE
    target = Path(out) if out else target
    if not target.parent.is_dir():
        raise UsageError(f"{target.parent} is not a folder; give --out a file in an existing folder")
    views = [run_view(RunData(p), decimation) for p in runs]
    title = runs[0].name if len(runs) == 1 else f"{runs[0].parent.parent.name}/{runs[0].parent.name}"
    try:
        target.write_text(render(views, f"pcnlab view: {title}"), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {target} ({exc.strerror}); "
                         "give --out a file in a folder you can write") from None
    give_back(target)   # written under sudo: the invoking user's, like the rest of the run
    records = sum(p.records for v in views for p in v.ports)
    drawn = sum(p.drawn for v in views for p in v.ports)
    say(f"view: {target} ({len(views)} run(s), {records} queue records, {drawn} queue points drawn, "
        f"{target.stat().st_size / 1e6:.1f} MB, {time.monotonic() - started:.1f} s)")
    return target


def run_views(runs: list[Path], say=print) -> list[Path]:
    """Each run's own view.html, written where it is missing or older than the run's metrics.json (what
    `pcnlab report` links); a run whose view fails is said in one line and skipped."""
    written = []
    for run in runs:
        target, metrics = run / VIEW_FILE, run / "metrics.json"
        if target.exists() and (not metrics.exists() or target.stat().st_mtime >= metrics.stat().st_mtime):
            written.append(target)
            continue
        try:
            written.append(write_view(run, target, say=lambda line: None))
        except Exception as exc:  # noqa: BLE001 -- one run's view must not stop the report
            say(f"(view of {run.name} skipped: {type(exc).__name__}: {exc})")
    return written


def view_links(folder: Path, views: list[Path]) -> str:
    """report.md's section linking each run's view (paths relative to the sweep folder)."""
    from urllib.parse import quote

    lines = ["", "## Each run, interactive", "",
             "Queues, marks, windows and iterations of each run (`pcnlab view RUN`; opens offline):", ""]
    lines += [f"- [{v.parent.name}]({quote(str(v.relative_to(folder)), safe='/=,')})" for v in views]
    return "\n".join(lines) + "\n"
