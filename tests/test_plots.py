"""Figures leave the caller's matplotlib alone: no backend switch, no pyplot state."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_drawing_figures_keeps_the_backend_and_never_loads_pyplot(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        import matplotlib
        before = matplotlib.get_backend()
        import pandas as pd
        from headway.plots.depth import plot_depth
        from headway.plots import circuits, development, emergence, heads, llm, modular, probes, sorting  # noqa: F401
        table = pd.DataFrame({{"hops": [1, 2], "layers": [1, 1], "accuracy": [0.9, 0.3], "accuracy_min": [0.9, 0.2],
                               "accuracy_max": [0.9, 0.4], "chance_roots": [0.25, 0.25], "chance_vocab": [0.06, 0.06],
                               "bound": [1, 2]}})
        path = plot_depth(table, r"{tmp_path / 'depth.png'}")
        assert path.stat().st_size > 0
        assert matplotlib.get_backend() == before, (before, matplotlib.get_backend())
        assert "matplotlib.pyplot" not in sys.modules
        print(before)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={"MPLBACKEND": "svg", "PATH": ""}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "svg"
