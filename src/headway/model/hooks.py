"""Hook points named by the module tree, and the dispatch of user hooks during one forward call.

A module that exposes activations subclasses `HookedModule` and lists its local hook points
(`hook_points()`, e.g. "hook_z"); their full names are its path in the model plus the local name
("blocks.0.attn.hook_z"), assigned once by `name_hook_points` after the tree is built. So a name
exists exactly when a module emits it, and no list of names is kept by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from torch import Tensor, nn

Hook = Callable[[Tensor, str], Tensor | None]
# Which hook points a call reads (TransformerLens' `names_filter`): None for all, one name, a list of names,
# or a predicate on the name.
NamesFilter = str | Iterable[str] | Callable[[str], bool] | None


def positionwise(hook: Hook) -> Hook:
    """`hook` marked as acting on each position alone, aligned to the sequence's end (so it accepts the last P
    positions of its point): the model may then run a hooked final block on the read-out position only."""

    def marked(tensor: Tensor, name: str) -> Tensor | None:
        return hook(tensor, name)

    marked.positionwise = True  # type: ignore[attr-defined]
    return marked


def is_positionwise(hook: Hook) -> bool:
    """Whether `hook` was marked by `positionwise`."""
    return getattr(hook, "positionwise", False)


class HookDispatch:
    """The hooks of one forward call: `dispatch(name, tensor)` returns the tensor, replaced when
    the hook registered under `name` returned one."""

    __slots__ = ("hooks",)

    def __init__(self, hooks: Mapping[str, Hook] | None) -> None:
        self.hooks = hooks or {}

    def __call__(self, name: str, tensor: Tensor) -> Tensor:
        hook = self.hooks.get(name)
        if hook is None:
            return tensor
        out = hook(tensor, name)
        return tensor if out is None else out

    def wants(self, names: Iterable[str]) -> bool:
        """Whether any of `names` has a hook in this call."""
        return any(n in self.hooks for n in names)


class HookedModule(nn.Module):
    """A module with named hook points; `hook[local]` is the full name of its point `local`."""

    hook: dict[str, str]

    def hook_points(self) -> tuple[str, ...]:
        """Local names of the hook points this module emits, in the order it emits them."""
        return ()


def name_hook_points(root: nn.Module) -> list[str]:
    """Give every HookedModule under `root` the full names of its hook points; return all of them
    in module-tree order."""
    names: list[str] = []
    for path, module in root.named_modules():
        if isinstance(module, HookedModule):
            prefix = f"{path}." if path else ""
            module.hook = {local: prefix + local for local in module.hook_points()}
            names.extend(module.hook.values())
    return names



def filter_names(names_filter: NamesFilter, names: Sequence[str]) -> list[str]:
    """The hook points of `names` that `names_filter` selects, in model order: all for None, those a
    predicate accepts, or the names given (each must exist: an unknown name raises KeyError naming it)."""
    if names_filter is None:
        return list(names)
    if callable(names_filter):
        return [name for name in names if names_filter(name)]
    wanted = [names_filter] if isinstance(names_filter, str) else list(names_filter)
    unknown = sorted(set(wanted) - set(names))
    if unknown:
        raise KeyError(f"unknown hook names {unknown}; see the model's hook_names()")
    return wanted
