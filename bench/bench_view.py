"""`pcnlab view` on a long run (docs/results.md, "Looking at a run"): the time to write the HTML file, its size, and in
headless Chromium the time to first paint (goal: under 3 s, under 20 MB).

    .venv/bin/python bench/bench_view.py RUN [--screenshot docs/img/view.png] [--iteration N]

RUN: a run folder, e.g. a 60 s pcn-paper run with telemetry on every packet:
    pcnlab run experiments/pcn-paper.yaml --set duration_s=60 --set repetitions=1 \\
        --set 'sweep.mode=[pcn]' --set jobs.0.iterations=28

First paint is Chromium's own `first-contentful-paint` (the page's banner), and "plots drawn": from
navigation start until Bokeh's document is on the page and two animation frames have been painted
after it (its plots are drawn in the first). Each is the median of `--loads` fresh loads.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from pcnlab.chromium import Page
from pcnlab.analysis.view import write_view
from pcnlab.cmdline import OneLineParser, count, natural

DRAWN = """new Promise(done => {
  const ready = () => window.Bokeh !== undefined && Bokeh.documents.length > 0 && Bokeh.documents[0].roots().length > 0;
  const frames = () => requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now())));
  const poll = () => ready() ? frames() : requestAnimationFrame(poll);
  poll();
})"""


def main() -> None:
    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--loads", type=count, default=3)
    ap.add_argument("--screenshot", help="a PNG of the view jumped to --iteration")
    ap.add_argument("--iteration", type=natural, default=10)
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="pcnlab-view-")) / "view.html"
    started = time.monotonic()
    write_view(args.run, out)
    written_s = time.monotonic() - started
    paints, drawn = [], []
    for _ in range(args.loads):
        with Page() as page:
            page.open(out)
            drawn.append(page.evaluate(DRAWN, timeout_s=60) / 1000)
            paints.append(page.evaluate("performance.getEntriesByType('paint').find(e => e.name === "
                                        "'first-contentful-paint').startTime") / 1000)
            assert not page.errors, page.errors
            if args.screenshot and len(paints) == args.loads:
                page.evaluate(f"Bokeh.documents[0].get_model_by_name('jump').value = '{args.iteration}'")
                time.sleep(1.0)
                page.screenshot(args.screenshot)
    print(f"write: {written_s:.1f} s; size: {out.stat().st_size / 1e6:.1f} MB; first contentful paint: "
          f"{statistics.median(paints):.2f} s; plots drawn: {statistics.median(drawn):.2f} s "
          f"(median of {args.loads} loads: {', '.join(f'{d:.2f}' for d in drawn)})")


if __name__ == "__main__":
    main()
