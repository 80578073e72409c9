"""`$ref:node_key.field` expressions in a plan node's config.

Reference ("ExecutionContext construction"): node_config is the node's config after
resolving its *top-level* `$ref:node_key.field` values against a synthetic namespaced
map `{node_key: provider_refs}` built from every COMPLETED node. Only top-level values
are resolved: a nested dict or list is copied as it is (plan compilation refuses a
`$ref:` string anywhere below the top level, so a nested one can never reach an
executor unresolved by accident).

The field part may be a dotted path into nested provider_refs:
`$ref:withdraw.receipt.txid` is `refs_by_node["withdraw"]["receipt"]["txid"]`.
A field that is missing, or present but null, does not resolve: a null txid handed to
an executor that moves money is a bug, not a value.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

REF_PREFIX = "$ref:"

_KEY = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_FIELD_SEGMENT = re.compile(r"^[A-Za-z0-9_-]+$")


class ConfigRefResolutionError(Exception):
    """A `$ref` in a node's config could not be resolved when the node was dispatched.

    The dispatcher turns it into FAILED with error_code CONFIG_REF_UNRESOLVED.
    """

    def __init__(self, node_key: str, ref: str, reason: str) -> None:
        self.node_key = node_key
        self.ref = ref
        self.reason = reason
        super().__init__(f"node {node_key!r}: cannot resolve {ref!r}: {reason}")


def parse_ref(value: Any) -> tuple[str, str] | None:
    """`"$ref:withdraw.txid"` → `("withdraw", "txid")`; None if `value` is not a ref.

    A string that starts with the prefix but is not `node_key.field[.field…]` raises
    ValueError naming the string, since it can only be a typo.
    """
    if not isinstance(value, str) or not value.startswith(REF_PREFIX):
        return None
    body = value[len(REF_PREFIX) :]
    node_key, dot, field = body.partition(".")
    if not dot or not _KEY.match(node_key):
        raise ValueError(
            f"malformed reference {value!r}: expected '$ref:<node_key>.<field>' "
            "with a node key matching ^[a-z][a-z0-9_]{0,63}$"
        )
    if not all(_FIELD_SEGMENT.match(segment) for segment in field.split(".")):
        raise ValueError(
            f"malformed reference {value!r}: field path {field!r} must be dot-separated "
            "non-empty names of letters, digits, '_' or '-'"
        )
    return node_key, field


def referenced_nodes(config: Mapping[str, Any]) -> set[str]:
    """Node keys referenced by the top-level string values of `config`."""
    keys: set[str] = set()
    for value in config.values():
        parsed = parse_ref(value)
        if parsed is not None:
            keys.add(parsed[0])
    return keys


def resolve_refs(
    node_key: str,
    config: Mapping[str, Any],
    refs_by_node: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """A deep copy of `config` with every top-level `$ref` replaced by its value.

    `refs_by_node` holds the provider_refs of COMPLETED nodes only, so a reference to a
    node that has not completed fails here rather than reading a half-written value.
    """
    resolved: dict[str, Any] = {}
    for name, value in config.items():
        try:
            parsed = parse_ref(value)
        except ValueError as exc:
            raise ConfigRefResolutionError(node_key, value, str(exc)) from None
        if parsed is None:
            resolved[name] = copy.deepcopy(value)
            continue
        ref_node, field = parsed
        if ref_node not in refs_by_node:
            raise ConfigRefResolutionError(
                node_key, value, f"node {ref_node!r} has not completed (no provider_refs)"
            )
        current: Any = refs_by_node[ref_node]
        walked: list[str] = []
        for segment in field.split("."):
            if not isinstance(current, Mapping) or segment not in current:
                where = f"{ref_node}.{'.'.join(walked)}" if walked else ref_node
                raise ConfigRefResolutionError(
                    node_key, value, f"provider_refs of {where!r} have no field {segment!r}"
                )
            current = current[segment]
            walked.append(segment)
        if current is None:
            raise ConfigRefResolutionError(node_key, value, f"{ref_node}.{field} is null")
        resolved[name] = copy.deepcopy(current)
    return resolved
