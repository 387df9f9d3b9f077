"""The MLflow UI, in a real browser, on a store a real sweep wrote: what does a new user see first?

    python benchmarks/ui_check.py --store sqlite:///mlruns/mlflow.db --out ui_shots/ [--chromium /usr/bin/chromium]

Starts `mlflow ui` on 127.0.0.1 on that store, opens each experiment's page in headless Chromium
(Playwright), waits for the page to settle, and saves a screenshot and the visible text per experiment. It
prints, per experiment and for a plain link and the link convtune prints, the URL the UI landed on, whether
the runs table is on screen (the names of the runs convtune wrote appear in it) and whether the GenAI trace
overview is instead; and per sweep, its dashboard (the parent run's description) expanded, with whether its table's
cells stand apart and its "fastest first" link opens the runs table sorted by latency. Needs `pip install playwright` and a
Chromium (Debian: `apt-get install chromium`); a manual check with evidence, not part of the test suite.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from convtune.track.store import ui_link


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(a.store)
    experiments = [e for e in client.search_experiments() if e.name != "Default"]
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", a.store, "--host",
                               "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    failures = 0
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    print("error: mlflow ui did not start", file=sys.stderr)
                    return 2
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            for exp, how in [(e, h) for e in experiments for h in ("plain link", "convtune's link")]:
                names = [r.info.run_name for r in client.search_runs([exp.experiment_id], max_results=50)]
                base = f"http://127.0.0.1:{port}"
                page.goto(f"{base}/#/experiments/{exp.experiment_id}" if how == "plain link"
                          else ui_link(exp.experiment_id, base))
                page.wait_for_load_state("load")
                try:
                    page.get_by_text(names[-1], exact=True).first.wait_for(timeout=30_000)  # the oldest run
                    expanders = page.locator("button[data-component-id*='runnamecellrenderer']")  # the ⊞ of a parent
                    for i in range(expanders.count()):  # a sweep's children sit under its parent row
                        expanders.nth(i).click()
                    page.wait_for_timeout(1500)
                except Exception:  # noqa: BLE001 - reported below as not shown
                    pass
                text = page.inner_text("body")
                slug = "".join(c if c.isalnum() else "_" for c in f"{exp.name} {how}")
                page.screenshot(path=str(out / f"{slug}.png"), full_page=False)
                (out / f"{slug}.txt").write_text(text)
                shown = [n for n in names if n in text]
                traces = "Traces" in text and not shown
                print(f"{exp.name}, {how}: landed on {page.url.split('#', 1)[-1]} · {len(shown)}/{len(names)} run names "
                      f"on screen · GenAI trace overview instead: {traces} · kind tag "
                      f"{exp.tags.get('mlflow.experimentKind')}")
                for n in names[:8]:
                    print(f"    run name: {n}{'' if n in text else '   (not on screen)'}")
                failures += 0 if shown or how == "plain link" else 1
            failures += sum(dashboards(page, client, f"http://127.0.0.1:{port}", out))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 1 if failures else 0


MIN_GAP_PX = 6  # between two header texts: 2 px read as one word ("vs cuDNNcorrect"); with the padding, 18 px
# The horizontal gap between the text of two table headers (not their cells, which always touch), in px
TEXT_GAP = """([a, b]) => {
  const edge = (label) => {
    const th = [...document.querySelectorAll('th')].find(t => t.textContent.includes(label));
    if (!th) return null;
    const walk = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      const i = n.textContent.indexOf(label);
      if (i < 0) continue;
      const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + label.length);
      return r.getBoundingClientRect();
    }
    return null;
  };
  const [l, r] = [edge(a), edge(b)];
  return l && r ? r.left - l.right : null;
}"""


def dashboards(page, client, base: str, out: Path) -> list[int]:
    """Each sweep's parent run page (its description: the dashboard), expanded: a screenshot, and whether the ranked
    table's header cells stand apart (a gap between "vs cuDNN" and "correct") and its links open the runs table.
    Returns a failure count per dashboard."""
    from convtune.record import Tag

    failed = []
    for exp in client.search_experiments():
        for run in client.search_runs([exp.experiment_id], filter_string="tags.`mlflow.note.content` != ''"):
            if Tag.SWEEP_DIR not in run.data.tags:
                continue
            page.goto(f"{base}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}?workflowType=machine_learning")
            page.get_by_text("Show more").first.click(timeout=30_000)
            page.wait_for_timeout(1000)
            gap = page.evaluate(TEXT_GAP, ["vs cuDNN", "correct"])  # between the two headers' text, in px
            link = page.get_by_role("link", name="All of this sweep's runs, fastest first").first
            page.screenshot(path=str(out / f"dashboard_{run.info.run_id[:8]}.png"), full_page=True)
            with page.context.expect_page(timeout=10_000) as opened:
                link.click()
            runs_page = opened.value
            runs_page.wait_for_timeout(3000)
            sorted_ok = "Sort: latency_ms" in runs_page.inner_text("body")
            runs_page.close()
            print(f"dashboard of {run.info.run_name}: table header gap {gap} px · its runs link opens the table "
                  f"sorted by latency: {sorted_ok}")
            failed.append(0 if gap is not None and gap >= MIN_GAP_PX and sorted_ok else 1)
    return failed


if __name__ == "__main__":
    sys.exit(main())
