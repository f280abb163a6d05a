"""The experiment's table and report: console text, Markdown, self-contained HTML, plots.

`write_report` writes `report.md` (PNG files in `plots/`) and `report.html`
(the same PNGs embedded as base64, so the page stands alone) beside the runs.
Plots: the measures per system, per-query differences from the baseline
(sorted bars), 11-point interpolated precision-recall curves (ir-measures'
IPrec@0.0 ... IPrec@1.0), and a heat-map per parameter sweep.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrieval import storage
from retrieval.evaluation.measures import depth_differences

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from retrieval.experiments.outcome import Outcome, SweepResult

REPORT_VERSION = 2
TESTS = (("t", "t", "paired t-test"), ("wilcoxon", "w", "Wilcoxon signed-rank test"))
DEPTH_MARK = "†"  # compared with the baseline at another depth, on a measure that looks past the shallower


def fmt_p(p: float) -> str:
    """A p-value in a few characters."""
    if p != p:
        return "n/a"
    return f"{p:.4f}" if p >= 0.0001 else f"{p:.0e}"


def marks(outcome: Outcome, system: str, measure: str) -> str:
    """'t', 'w' or 'tw': which tests find a significant difference from the baseline."""
    c = outcome.comparisons.get((system, measure))
    if c is None:
        return ""
    return "".join(letter for test, letter, _ in TESTS if c.significant(test, outcome.cfg.alpha))


def other_depths(outcome: Outcome) -> dict[str, list[str]]:
    """{system: measures on which it is compared with the baseline at another depth}."""
    if not outcome.depths or outcome.cfg.baseline not in outcome.depths:
        return {}
    return depth_differences(outcome.depths, outcome.cfg.baseline, outcome.cfg.measures)


def table(outcome: Outcome) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the systems x measures table (value, Holm-adjusted p-values)."""
    header = ["system"]
    for m in outcome.cfg.measures:
        header += [m, "p(t)", "p(w)"]
    rows = []
    deeper = other_depths(outcome)
    for system, means in outcome.means.items():
        row = [system + (" (baseline)" if system == outcome.cfg.baseline else "")]
        for m in outcome.cfg.measures:
            c = outcome.comparisons.get((system, m))
            mark = marks(outcome, system, m) + (DEPTH_MARK if m in deeper.get(system, []) else "")
            row.append(f"{means[m]:.4f}" + (f" {mark}" if mark else ""))
            row += [fmt_p(c.p_holm[t]) for t, _, _ in TESTS] if c else ["", ""]
        rows.append(row)
    return header, rows


def legend(outcome: Outcome) -> str:
    """What the marks and p-values mean."""
    cfg = outcome.cfg
    n = len(outcome.means) - 1
    queries = max((c.queries for c in outcome.comparisons.values()), default=0)
    counted = ("over the judged topics each run answers (only_answered: true; trec_eval's default)"
               if cfg.only_answered else "over every judged topic, 0 where a run has no hits (trec_eval -c)")
    text = (f"Means {counted}. t / w: differs from the baseline {cfg.baseline} by the paired t-test /"
            f" Wilcoxon signed-rank test at Holm-adjusted p < {cfg.alpha} ({n} systems compared, "
            f"{queries} queries paired). p(t), p(w): Holm-adjusted p-values.")
    deeper = other_depths(outcome)
    if deeper:
        base = outcome.depths[cfg.baseline]
        runs = "; ".join(f"{s} {outcome.depths[s]}" for s in deeper)
        text += (f" {DEPTH_MARK}: compared at another depth than the baseline ({base} hits per query;"
                 f" {runs}), on a measure that counts documents below the shallower run's last rank: the"
                 " difference is partly one of depth.")
    return text


def pipe_table(header: list[str], rows: list[list[str]]) -> str:
    """An aligned Markdown pipe table."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def text_table(outcome: Outcome) -> str:
    """The console table: systems x measures, then the legend and sweep selections; then QA."""
    lines = [pipe_table(*table(outcome)), "", legend(outcome)] if outcome.means else []
    for s in outcome.sweeps:
        chosen = " / ".join(", ".join(f"{k}={v}" for k, v in c.items()) for c in s.chosen)
        lines.append(f"sweep {s.spec.name} ({s.spec.measure} on {s.evaluated_on}): {s.note}"
                     + (f"; selected {chosen}" if chosen else ""))
    if outcome.qa:
        lines += ["" if lines else "", qa_caption(outcome), "", pipe_table(*qa_table(outcome)), "",
                  *outcome.qa_notes]
    return "\n".join(lines).strip("\n")


def qa_caption(outcome: Outcome) -> str:
    qa = outcome.cfg.qa
    return (f"Retrieve-then-read on {qa.questions} (answerable questions; EM/F1 as SQuAD's script, "
            "answers conditioned on being in the passage); answer-recall@k: a gold answer string in a "
            "top-k passage.")


def qa_table(outcome: Outcome) -> tuple[list[str], list[list[str]]]:
    """System x passage count: EM, F1, answer recall."""
    rows = [[r["system"], str(r["passages"]), str(r["questions"]), f"{r['exact']:.1f}", f"{r['f1']:.1f}",
             f"{r['recall']:.3f}"] for r in outcome.qa]
    return ["system", "passages k", "questions", "EM", "F1", "answer-recall@k"], rows


# ---------------------------------------------------------------- plots


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def plot_measures(outcome: Outcome) -> bytes:
    """Grouped bars: each measure per system."""
    measures, systems = outcome.cfg.measures, list(outcome.means)
    fig = _figure(max(6.0, 1.1 * len(systems) + 2), 3.6)
    ax = fig.subplots()
    width = 0.8 / len(measures)
    for i, m in enumerate(measures):
        xs = [j + (i - (len(measures) - 1) / 2) * width for j in range(len(systems))]
        ax.bar(xs, [outcome.means[s][m] for s in systems], width, label=m)
    ax.set_xticks(range(len(systems)), systems, rotation=20, ha="right")
    ax.set_ylabel("mean over queries")
    ax.set_title("Measures per system")
    ax.set_ylim(0, 1.2 * max(max(v.values()) for v in outcome.means.values()))
    ax.legend(fontsize="small", ncols=len(measures), loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def plot_differences(outcome: Outcome, measure: str) -> bytes:
    """Per system, each query's measure minus the baseline's, sorted."""
    base = outcome.per_query[outcome.cfg.baseline]
    others = [s for s in outcome.per_query if s != outcome.cfg.baseline]
    cols = 2 if len(others) > 1 else 1
    rows = max(1, -(-len(others) // cols))
    fig = _figure(5.2 * cols, 2.4 * rows)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, system in zip(axes, others, strict=False):
        values = outcome.per_query[system]
        diffs = sorted(values[q][measure] - base[q][measure] for q in values if q in base)
        ax.bar(range(len(diffs)), diffs, width=1.0,
               color=["tab:green" if d > 0 else "tab:red" for d in diffs])
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_title(f"{system} − {outcome.cfg.baseline}", fontsize="medium")
        ax.set_ylabel(f"Δ {measure}", fontsize="small")
        ax.set_xticks([])
    for ax in axes[len(others):]:
        ax.set_visible(False)
    fig.suptitle(f"Per-query {measure} difference from the baseline (sorted)")
    return _png(fig)


def plot_pr(outcome: Outcome) -> bytes:
    """11-point interpolated precision-recall curves, one line per system."""
    fig = _figure(6.0, 4.2)
    ax = fig.subplots()
    recall = [r / 10 for r in range(11)]
    for system, precision in outcome.iprec.items():
        ax.plot(recall, precision, marker="o", markersize=3, label=system)
    ax.set_xlabel("recall")
    ax.set_ylabel("interpolated precision")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title("Interpolated precision-recall (11 points)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _png(fig)


def plot_sweep(result: SweepResult) -> bytes:
    """Heat-map of the sweep measure over the grid (a strip for a one-parameter grid)."""
    params = list(result.spec.grid)
    ys = result.spec.grid[params[0]]
    xs = result.spec.grid[params[1]] if len(params) > 1 else [""]
    grid = [[result.means[i * len(xs) + j] for j in range(len(xs))] for i in range(len(ys))]
    fig = _figure(1.0 * len(xs) + 2.8, 0.5 * len(ys) + 1.6)
    ax = fig.subplots()
    image = ax.imshow(grid, cmap="viridis", aspect="auto")
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            chosen = {params[0]: ys[i], **({params[1]: xs[j]} if len(params) > 1 else {})}
            ax.text(j, i, f"{v:.3f}" + ("*" if chosen in result.chosen else ""), ha="center",
                    va="center", fontsize="small", color="white" if v < sum(result.means) /
                    len(result.means) else "black")
    ax.set_yticks(range(len(ys)), [str(y) for y in ys])
    ax.set_xticks(range(len(xs)), [str(x) for x in xs])
    ax.set_ylabel(params[0])
    ax.set_xlabel(params[1] if len(params) > 1 else "")
    ax.set_title(f"{result.spec.name}: {result.spec.measure} on {result.evaluated_on}",
                 fontsize="medium")
    fig.colorbar(image, ax=ax)
    return _png(fig)


def plots(outcome: Outcome) -> dict[str, tuple[str, bytes]]:
    """{file name: (caption, PNG bytes)} of every plot of the report."""
    if not outcome.means:
        return {}
    measure = outcome.cfg.measures[0]
    out = {"measures.png": ("Measures per system", plot_measures(outcome)),
           "precision-recall.png": ("Interpolated precision-recall curves", plot_pr(outcome))}
    if len(outcome.per_query) > 1:
        out["differences.png"] = (f"Per-query {measure} difference from the baseline",
                                  plot_differences(outcome, measure))
    for s in outcome.sweeps:
        out[f"sweep-{s.spec.name}.png"] = (f"Sweep {s.spec.name}", plot_sweep(s))
    return out


# ---------------------------------------------------------------- Markdown and HTML


def sweep_table(result: SweepResult) -> tuple[list[str], list[list[str]]]:
    """The sweep measure over the grid: a matrix for two parameters, a column for one.

    Selected settings are marked with `*`.
    """
    params, grid = list(result.spec.grid), result.spec.grid
    cell = {json.dumps(p, sort_keys=True): f"{v:.4f}" + ("*" if p in result.chosen else "")
            for p, v in zip(result.points, result.means, strict=True)}
    if len(params) == 1:
        return ([params[0], result.spec.measure],
                [[str(v), cell[json.dumps({params[0]: v})]] for v in grid[params[0]]])
    a, b = params
    header = [f"{a} \\ {b}", *(str(v) for v in grid[b])]
    return header, [[str(x)] + [cell[json.dumps({a: x, b: y}, sort_keys=True)] for y in grid[b]]
                    for x in grid[a]]


def _sweep_caption(result: SweepResult) -> str:
    return (f"{result.spec.measure} on {result.evaluated_on} for {result.spec.pipeline}; "
            f"{result.note}.")


def _facts(outcome: Outcome) -> list[tuple[str, str]]:
    cfg = outcome.cfg
    return [("config", str(cfg.path)), ("collection", cfg.collection),
            ("topics / qrels", f"{cfg.topics} / {cfg.qrels}"),
            ("index", str(cfg.index_path)), ("runs", str(outcome.output_dir / "runs"))]


def markdown(outcome: Outcome, files: dict[str, tuple[str, bytes]]) -> str:
    """The report as Markdown, images referenced from plots/."""
    out = [f"# Experiment {outcome.cfg.name}", ""]
    out += [f"- {k}: `{v}`" for k, v in _facts(outcome)] + [""]
    if outcome.means:
        out += ["## Results", "", pipe_table(*table(outcome)), "", legend(outcome), "", "## Systems", ""]
        out += [f"- **{s}**: {d}" for s, d in outcome.systems.items()] + [""]
    if outcome.qa:
        out += ["## Question answering", "", qa_caption(outcome), "", pipe_table(*qa_table(outcome)), ""]
        out += [f"- {note}" for note in outcome.qa_notes] + [""]
    out += ["## Plots", ""] if files else []
    out += [f"![{caption}](plots/{name})\n" for name, (caption, _) in files.items()
            if not name.startswith("sweep-")]
    for s in outcome.sweeps:
        out += [f"## Sweep {s.spec.name}", "", _sweep_caption(s), "",
                pipe_table(*sweep_table(s)), "", f"![Sweep {s.spec.name}](plots/sweep-"
                f"{s.spec.name}.png)" if files else "", ""]
    return "\n".join(out)


def _html_table(header: list[str], rows: list[list[str]], css: str, strong: bool = False) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for cell in row:
            bold = strong and cell.rstrip(DEPTH_MARK).endswith((" t", " w", " tw", "*"))
            cells.append(f"<td{' class=sig' if bold else ''}>{html.escape(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<table class="{css}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


STYLE = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #bbb;padding:4px 8px;
text-align:right}th{background:#e8eef7}td:first-child,th:first-child{text-align:left}
td.sig{font-weight:bold;background:#fff4d6}figure{margin:1.5em 0}img{max-width:100%}
figcaption{color:#555;font-size:90%}.legend{color:#444;font-size:90%}"""


def _figure_html(name: str, caption: str, png: bytes) -> str:
    data = base64.b64encode(png).decode()
    e = html.escape
    return (f'<figure><img alt="{e(caption)}" data-plot="{e(name)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{e(caption)}</figcaption></figure>')


def html_page(outcome: Outcome, files: dict[str, tuple[str, bytes]]) -> str:
    """The report as one HTML page with the plots embedded (no server, no other files)."""
    e = html.escape
    facts = "".join(f"<li>{e(k)}: <code>{e(v)}</code></li>" for k, v in _facts(outcome))
    systems = "".join(f"<li><b>{e(s)}</b>: {e(d)}</li>" for s, d in outcome.systems.items())
    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
             f"<title>Experiment {e(outcome.cfg.name)}</title><style>{STYLE}</style></head><body>",
             f"<h1>Experiment {e(outcome.cfg.name)}</h1><ul>{facts}</ul>"]
    if outcome.means:
        parts += ["<h2>Results</h2>", _html_table(*table(outcome), "results", strong=True).replace(
                  "<table ", '<table id="results" ', 1),
                  f'<p class="legend">{e(legend(outcome))}</p><h2>Systems</h2><ul>{systems}</ul>']
    if outcome.qa:
        notes = "".join(f"<li>{e(n)}</li>" for n in outcome.qa_notes)
        parts += ["<h2>Question answering</h2>", f"<p>{e(qa_caption(outcome))}</p>",
                  _html_table(*qa_table(outcome), "qa"), f"<ul>{notes}</ul>"]
    parts.append("<h2>Plots</h2>" if files else "")
    parts += [_figure_html(name, *files[name]) for name in files if not name.startswith("sweep-")]
    for s in outcome.sweeps:
        name = f"sweep-{s.spec.name}.png"
        parts.append(f"<h2>Sweep {e(s.spec.name)}</h2><p>{e(_sweep_caption(s))}</p>"
                     + _html_table(*sweep_table(s), "sweep", strong=True)
                     + (_figure_html(name, *files[name]) if name in files else ""))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_report(outcome: Outcome) -> tuple[Path, Path]:
    """Write report.md (+ plots/*.png), the self-contained report.html and results.json, as one set
    (all or none replaced); return the two reports' paths.

    When nothing the report shows has changed since the last time, the files are kept as
    they are (drawing the plots is the slowest part of a re-run).
    """
    out = outcome.output_dir
    md, page, keyfile = out / "report.md", out / "report.html", out / "report.key"
    key = hashlib.sha256(json.dumps(
        [REPORT_VERSION, markdown(outcome, {}), outcome.per_query, outcome.iprec, outcome.qa,
         [(s.spec.grid, s.means, s.chosen) for s in outcome.sweeps]], sort_keys=True).encode()
    ).hexdigest()
    if md.is_file() and page.is_file() and keyfile.is_file() and keyfile.read_text() == key:
        return md, page
    files = plots(outcome)
    storage.write_files_atomic({
        **{out / "plots" / name: png for name, (_, png) in files.items()},
        md: markdown(outcome, files).encode(), page: html_page(outcome, files).encode(),
        out / "results.json": storage.json_bytes(results_json(outcome)), keyfile: key.encode()})
    return md, page


def results_json(outcome: Outcome) -> dict[str, Any]:
    """Means and Holm-adjusted p-values, for scripts."""
    return {"baseline": outcome.cfg.baseline, "means": outcome.means,
            "p_holm": {f"{s}|{m}": c.p_holm for (s, m), c in outcome.comparisons.items()},
            "p": {f"{s}|{m}": c.p for (s, m), c in outcome.comparisons.items()},
            "qa": outcome.qa}
