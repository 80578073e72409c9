"""verify_drift (reference §13) and ccip_drift (§14): record drift in drift_findings.

verify_drift re-reads the on-chain baselines, per configured chain, in parallel
and each within MG_VERIFY_DRIFT_LANE_TIMEOUT_SECONDS: the chain id, and for each
contract of MG_VERIFY_DRIFT_CONTRACTS the keccak of its code (`eth_getCode`) and,
for an ERC-20, `decimals()` and `symbol()` (`eth_call`); plus the signer address's
existence (its nonce or balance).
The first value seen is the baseline (trust on first use, `drift_baselines`);
a later difference opens one `drift_findings` row with the evidence, a match
clears it. A chain that does not answer is the finding `reachable`, not a crash.
A finding pages (a `drift` notification, warning) in the transaction that
opens it, and its clearing resolves that notification (qtg/services/notifications.py).

ccip_drift compares each CCIP lane's registry, as the CCIP sidecar client reports
it, with the lane qtg is configured with (MG_CCIP_LANES): the expected value is
the configuration, not a first sighting. Both record through `record_check`.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from eth_hash.auto import keccak

from qtg.db import Jsonb, sql_family
from qtg.domain.ccip import drift_checks, parse_lanes
from qtg.domain.cctp import parse_chains
from qtg.domain.evm import ERC20_DECIMALS_DATA, ERC20_SYMBOL_DATA, parse_drift_contracts
from qtg.providers.ccip.sidecar import SidecarClient
from qtg.providers.evm.rpc import RpcError
from qtg.services import notifications
from qtg.services.context import ServiceContext

SQL = sql_family(
    "drift", "baseline", "open_finding", "clear_finding", "list_findings", "configured_tokens"
)

log = logging.getLogger("qtg.services.drift")


def _dedupe_key(args: dict[str, Any]) -> str:
    return f"drift:{args['chain_id']}:{args['subject']}:{args['check_name']}"


async def verify_drift(ctx: ServiceContext) -> int:
    """The verify_drift pass: returns how many findings were opened or cleared."""
    rpcs = getattr(ctx.providers, "evm_rpcs", {})
    contracts = await watched_contracts(ctx)
    observations: dict[int, list[tuple[str, str, str]]] = {}

    async def lane(chain_id: int, rpc: Any) -> None:
        seen: list[tuple[str, str, str]] = []
        with trio.move_on_after(ctx.settings.verify_drift_lane_timeout_seconds) as scope:
            try:
                seen.append(("chain", "chain_id", str(await rpc.chain_id_on_chain())))
                for chain, address, erc20 in contracts:
                    if chain != chain_id:
                        continue
                    code = await rpc.call("eth_getCode", address, "latest")
                    code_hash = keccak(bytes.fromhex(code.removeprefix("0x")))
                    seen.append((address, "code_hash", "0x" + code_hash.hex()))
                    if erc20:
                        seen.append(
                            (address, "decimals", await _read(rpc, address, ERC20_DECIMALS_DATA))
                        )
                        seen.append(
                            (address, "symbol", await _read(rpc, address, ERC20_SYMBOL_DATA))
                        )
                for address in _signer_addresses(ctx):
                    used = await rpc.nonce(address) > 0 or await rpc.balance(address) > 0
                    seen.append((address.lower(), "signer_exists", "yes" if used else "no"))
                seen.append(("chain", "reachable", "yes"))
            except Exception as exc:  # an RPC failure of any kind: the chain did not answer
                seen = [("chain", "reachable", f"no: {type(exc).__name__}")]
        if scope.cancelled_caught:
            seen = [("chain", "reachable", "no: lane timeout")]
        observations[chain_id] = seen

    async with trio.open_nursery() as nursery:
        for chain_id, rpc in rpcs.items():
            nursery.start_soon(lane, chain_id, rpc)

    changed = 0
    new: list[dict[str, Any]] = []
    async with ctx.db.transaction() as tx:
        for chain_id, seen in observations.items():
            for subject, check_name, observed in seen:
                reachable = check_name == "reachable"
                args = {
                    "chain_id": chain_id,
                    "subject": subject,
                    "check_name": check_name,
                    # a chain is expected to answer; its first answer is not a baseline
                    "observed": "yes" if reachable else observed,
                }
                expected = await tx.fetchval(SQL.baseline, args)
                finding = await record_check(
                    tx, args, expected, observed, {"rpc_url": rpcs[chain_id].url}
                )
                if finding is not None:
                    changed += 1
                    if finding:
                        new.append(finding)
    for finding in new:
        log.warning("drift found", extra={"finding": finding})
    return changed


async def watched_contracts(ctx: ServiceContext) -> list[tuple[int, str, bool]]:
    """What verify_drift watches (issue 43: on by default for every configured token and
    bridge contract): MG_VERIFY_DRIFT_CONTRACTS, every ERC-20 a template's evm or ccip
    node pays with, each CCIP lane's routers (MG_CCIP_LANES) and each CCTP chain's
    TokenMessenger, MessageTransmitter and USDC (MG_CCTP_CHAINS). (chain_id, address,
    erc20), one per contract. A token found drifted holds its transfers
    (EVM_DRIFT_HOLD) until the finding clears."""
    watched: dict[tuple[int, str], tuple[str, bool]] = {}

    def add(chain_id: int, address: str, erc20: bool) -> None:
        # one per contract, spelled as first listed (a baseline's subject keeps its spelling)
        key = (chain_id, address.lower())
        spelled, was = watched.get(key, (address, False))
        watched[key] = (spelled, was or erc20)

    for chain_id, address, erc20 in parse_drift_contracts(ctx.settings.verify_drift_contracts):
        add(chain_id, address, erc20)
    lanes = parse_lanes(ctx.settings.ccip_lanes)
    for lane in lanes.values():
        add(lane.chain_id, lane.router, False)
        add(lane.dest_chain_id, lane.dest_router, False)
    for chain in parse_chains(ctx.settings.cctp_chains).values():
        add(chain.chain_id, chain.token_messenger, False)
        add(chain.chain_id, chain.message_transmitter, False)
        add(chain.chain_id, chain.usdc, True)
    for row in await ctx.db.fetch(SQL.configured_tokens):
        if row["kind"] == "evm":
            add(int(row["chain"]), row["address"], True)
        elif row["chain"] in lanes:
            add(lanes[row["chain"]].chain_id, row["address"], True)
    return [(chain_id, spelled, erc20) for (chain_id, _), (spelled, erc20) in watched.items()]


async def record_check(
    tx: Any, args: dict[str, Any], expected: str, observed: str, evidence: dict[str, Any]
) -> dict[str, Any] | None:
    """One check against its expected value, in the caller's transaction: a match
    clears an open finding (and resolves its notification), a difference opens one
    (and pages, a `drift` warning). Returns the new finding, {} when one was
    cleared, None when nothing changed. verify_drift and ccip_drift share it."""
    if observed == expected:
        if await tx.fetchrow(SQL.clear_finding, args) is not None:
            await notifications.resolve_notification(tx, _dedupe_key(args))
            return {}
        return None
    finding = {**args, "expected": expected, "observed": observed}
    row = await tx.fetchrow(SQL.open_finding, {**finding, "evidence": Jsonb(evidence)})
    if row is None:
        return None
    chain_id, subject, check_name = args["chain_id"], args["subject"], args["check_name"]
    await notifications.raise_notification(
        tx,
        kind="drift",
        severity="warning",
        dedupe_key=_dedupe_key(args),
        subject=f"drift on chain {chain_id}: {subject} {check_name}",
        body=f"expected {expected!r}, observed {observed!r}",
        links={"chain_id": chain_id, "subject": subject, "check": check_name},
    )
    return finding


async def ccip_drift(ctx: ServiceContext) -> int:
    """The ccip_drift pass (reference §14): each configured lane's registry, as the CCIP
    sidecar client reports it (router, ramps, token pools, rate limits), against the
    lane qtg is configured with; findings in drift_findings (subject `ccip:<lane>`),
    cleared when the lane matches again. A sidecar that does not answer is the
    finding `reachable`. Returns how many findings were opened or cleared."""
    client: SidecarClient | None = ctx.providers.ccip_sidecar
    lanes = getattr(ctx.providers, "ccip_lanes", {}) or parse_lanes(ctx.settings.ccip_lanes)
    observations: list[tuple[Any, list[tuple[str, str, str]], dict[str, Any]]] = []
    for lane in lanes.values():
        evidence: dict[str, Any] = {"sidecar": getattr(client, "name", None), "lane": lane.name}
        try:
            with trio.fail_after(ctx.settings.ccip_sidecar_timeout_seconds * 3):
                if client is None:  # the runtime starts this pass only with a sidecar
                    raise LookupError("no CCIP sidecar client is registered")
                seen = await client.lane_registry(lane)
        except Exception as exc:  # a sidecar or chain that does not answer is a finding
            checks = [("reachable", "yes", f"no: {type(exc).__name__}")]
            evidence["error"] = str(exc)[:500]
        else:
            checks = [("reachable", "yes", "yes"), *drift_checks(lane, seen)]
        observations.append((lane, checks, evidence))
    changed = 0
    new: list[dict[str, Any]] = []
    async with ctx.db.transaction() as tx:
        for lane, checks, evidence in observations:
            for check_name, expected, observed in checks:
                args = {
                    "chain_id": lane.chain_id,
                    "subject": f"ccip:{lane.name}",
                    "check_name": check_name,
                }
                finding = await record_check(tx, args, expected, observed, evidence)
                if finding is not None:
                    changed += 1
                    if finding:
                        new.append(finding)
    for finding in new:
        log.warning("ccip drift found", extra={"finding": finding})
    return changed


async def list_findings(db: Any, *, open_only: bool, limit: int) -> list[dict[str, Any]]:
    async with db.transaction() as tx:
        rows = await tx.fetch(SQL.list_findings, {"open_only": open_only, "limit": limit})
    return [dict(r) for r in rows]


async def _read(rpc: Any, address: str, data: str) -> str:
    try:
        answer: str = await rpc.eth_call(address, data)  # EvmRpc.eth_call: hex return data
    except RpcError as exc:  # a reverting call is an observation, not a crash
        return f"error: {exc.message}"
    return answer


def _signer_addresses(ctx: ServiceContext) -> list[str]:
    return [a for s in ctx.providers.signers() if (a := getattr(s, "address", None))]
