"""`headway reach`: the share of link orders from which the query can reach the answer in L layers
(Theorem 1's information-flow rule played out per attention mode, order and layout; docs/depth-bound.md)."""

from __future__ import annotations

from pathlib import Path

import click

from headway.cli.options import OutputPath, parse_values


@click.command()
@click.option("--hops", default="1..9", show_default=True, metavar="D[,D…]", help="Hop counts: comma list or A..B.")
@click.option("--layers", default="1..3", show_default=True, metavar="L[,L…]",
              help="Layer counts: comma list or A..B.")
@click.option("--attention", default="causal,bidirectional", show_default=True, metavar="A[,A…]",
              help="causal, bidirectional (comma list).")
@click.option("--order", default="shuffled,chain", show_default=True, metavar="O[,O…]",
              help="shuffled, chain (comma list).")
@click.option("--layout", default="packed", show_default=True, metavar="L[,L…]", help="packed, flat (comma list).")
@click.option("--chains", default=4, type=int, show_default=True,
              help="K chains: the ceiling f + (1-f)/K guesses among K roots (in --csv).")
@click.option("--samples", default=20000, type=int, show_default=True,
              help="Random orders per simulated cell (D > 8, causal, shuffled).")
@click.option("--seed", default=0, type=int, show_default=True, help="Seed of every simulated cell.")
@click.option("--csv", "csv_path", type=OutputPath(folder=False), default=None,
              help="Also write every cell (fraction, interval, method, ceiling, theorem_bound) as CSV.")
@click.option("--per-order", is_flag=True,
              help="Instead, every link order of the queried chain (D <= 6) with the layers the flow needs in it and "
                   "whether root-ward reads alone reach it (packed); --csv writes these rows.")
def reach(hops: str, layers: str, attention: str, order: str, layout: str, chains: int, samples: int, seed: int,
          csv_path: Path | None, per_order: bool) -> None:
    """Print the % of link orders from which the query reaches x_0, per layers (rows) and hops (columns)."""
    from headway.analysis.retrieval.reach import reach_table

    if per_order:
        table = _per_order(parse_values("hops", hops, int), parse_values("layers", layers, int),
                           parse_values("attention", attention, str), parse_values("layout", layout, str))
        if csv_path is not None:
            from headway.runs import layout as files

            files.write_text(csv_path, table.to_csv(index=False))
        click.echo(table.to_string(index=False))
        return
    table = reach_table(parse_values("hops", hops, int), parse_values("layers", layers, int),
                        parse_values("attention", attention, str), parse_values("order", order, str),
                        parse_values("layout", layout, str), chains, samples=samples, seed=seed)
    if csv_path is not None:
        from headway.runs import layout

        layout.write_text(csv_path, table.to_csv(index=False))
    click.echo(format_table(table))


def format_table(table) -> str:
    """Wide text table: one row per attention, order, layout and layers, one column per hop count;
    `~` marks a simulated cell, `*` a cell beyond Theorem 1's bound (min_layers(D) > layers)."""
    cells = table.assign(cell=[f"{100 * f:.1f}{'~' if m == 'simulated' else ''}{'' if ok else '*'}"
                               for f, m, ok in zip(table.fraction, table.method, table.theorem_bound, strict=True)])
    keys = ["attention", "order", "layout", "layers"]
    wide = cells.pivot(index=keys, columns="hops", values="cell").reset_index()
    wide.columns = [c if isinstance(c, str) else f"D={c}" for c in wide.columns]
    given = {key: {v: i for i, v in enumerate(dict.fromkeys(table[key]))} for key in keys}  # as asked
    wide = wide.sort_values(keys, key=lambda column: column.map(given[column.name]))
    notes = "% of link orders reaching x_0; ~ simulated (95% interval in --csv), else exact; * beyond Theorem 1's bound"
    return wide.to_string(index=False) + "\n" + notes


def _per_order(hops: list[int], layers: list[int], attentions: list[str], layouts: list[str]):
    """`order_needs` of every attention × layout × layers × hops, one block after another, each value checked
    before any is computed."""
    import itertools

    import pandas as pd

    from headway.analysis.retrieval.orders import check_listable, order_needs

    cells = list(itertools.product(attentions, layouts, layers, hops))
    for a, lay, t, d in cells:
        check_listable(d, t, a, lay)
    frames = [order_needs(d, t, a, lay).assign(attention=a, layout=lay, layers=t, hops=d) for a, lay, t, d in cells]
    table = pd.concat(frames, ignore_index=True)
    cell = ["attention", "layout", "layers", "hops"]
    return table[cell + [c for c in table.columns if c not in cell]]
