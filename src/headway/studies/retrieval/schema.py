"""The retrieval study's analysis tables, declared once: what `analyse_members` writes for each ensemble and
what a cached table must hold to be read back (`headway.runs.schema`)."""

from __future__ import annotations

from headway.runs.schema import TableSchema

# Attention scores of a head (`headway.analysis.retrieval.heads`): one per hop of the query, the conditional
# variant's two more.
_SCORES = {"query_hop{n}": "float", "query_chain": "float", "link_next": "float", "link_prev": "float",
           "query_class": "float", "query_rule": "float"}
_CONDITIONAL = ("query_class", "query_rule")
_HEAD = {"instance": "int", "layer": "int", "head": "int"}
_TAGS = {"run_id": "str"}

SCHEMAS = {
    "heads": TableSchema.of({
        **_HEAD, **_SCORES, "role": "str", "role_score": "float", "zero_accuracy": "float", "zero_drop": "float",
        "mean_accuracy": "float", "mean_drop": "float", "resample_accuracy": "float", "resample_drop": "float",
        "patch_accuracy": "float", "patch_drop": "float", "patch_flip": "float", "clean_accuracy": "float",
        "group_drop": "float", "member_drop": "float", "in_circuit": "bool", "evidence": "str", **_TAGS},
        optional=_CONDITIONAL),
    "circuit": TableSchema.of({
        "instance": "int", "clean_accuracy": "float", "circuit_ablated_accuracy": "float",
        "circuit_resample_accuracy": "float", "rest_ablated_accuracy": "float", "rest_resample_accuracy": "float",
        "all_ablated_accuracy": "float", "faithfulness": "float", "circuit_heads": "int", "minimal_heads": "int",
        "minimal_circuit": "str", "minimal_faithfulness": "float", "random_sets": "int",
        "random_ablated_accuracy": "float", "random_rest_accuracy": "float", "p_necessary": "float",
        "p_sufficient": "float", "random_minimal_rest_accuracy": "float", "p_minimal_sufficient": "float", **_TAGS}),
    "paths": TableSchema.of({
        "instance": "int", "sender_layer": "int", "receiver_layer": "int", "senders": "str", "receivers": "str",
        "channel": "str", "path_drop": "float", "direct_drop": "float", "other_drop": "float", **_TAGS}),
    "circuit_sensitivity": TableSchema.of({
        "instance": "int", "role_threshold": "float", "min_drop": "float", "circuit_heads": "int",
        "circuit_ablated_accuracy": "float", "rest_ablated_accuracy": "float", "max_other_head_drop": "float",
        **_TAGS}),
    "head_curves": TableSchema.of({"step": "int", **_HEAD, **_SCORES, **_TAGS}, optional=_CONDITIONAL),
    # `passed`: accuracy ≥ 0.9, written by analyses before the reach threshold became the reader's rule
    # (`reach_accuracy`); read by nothing, declared so those tables still load
    "probes": TableSchema.of({
        "instance": "int", "layer": "int", "site": "str", "hops": "int", "accuracy": "float", "samples": "int",
        "train_accuracy": "float", "train_samples": "int", "passed": "bool", "chance": "float", **_TAGS},
        optional=("passed",)),
    # the position control (`chain_drop`, `offchain_drop`) came with version 8; older caches lack it
    "composition": TableSchema.of({
        "instance": "int", "clean_accuracy": "float", "composing_heads": "str", "composing_drop": "float",
        "control_sets": "int", "control_drop": "float", "chain_drop": "float", "offchain_drop": "float",
        "uniform_next": "float", "uniform_prev": "float", **_TAGS}, optional=("chain_drop", "offchain_drop")),
    # the flow-gated link probes read per order class of each link's chain and link number (version 9)
    "probe_orders": TableSchema.of({
        "instance": "int", "layer": "int", "site": "str", "probe_hops": "int", "order_class": "str", "link": "int",
        "samples": "int", "accuracy": "float", **_TAGS}),
    # accuracy per link order of the queried chain (per order class beyond five hops): `headway.analysis.retrieval.orders`
    "orders": TableSchema.of({
        "instance": "int", "link_order": "str", "order_class": "str", "examples": "int", "correct": "int",
        "accuracy": "float", "reachable": "float", "layers_needed": "int", "rootward_reachable": "float", "leafward_layers": "str",
        "hop{n}_accuracy": "float", **_TAGS}),
}
