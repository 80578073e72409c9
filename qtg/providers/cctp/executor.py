"""The `cctp` executor (issue 28): Circle CCTP's burn, attestation, mint and mint status.

Node config `cctp` (on the burn): {"source_chain_id": int, "destination_chain_id": int,
"decimals": int (6)}; the intent gives `amount` (whole USDC) and `destination` (the
mint recipient on the destination chain). Later nodes read what they need from
their predecessor's provider_refs (the chain of refs carries it forward).

- cctp_burn (action): an allowance raise for the source TokenMessenger when the
  standing allowance is short (signed in prepare, broadcast just below the burn's
  nonce), then `depositForBurn(amount, destinationDomain, mintRecipient, burnToken)`.
  The tx hashes are written ahead of the broadcast (evm_nonce_reservations); the
  observation reads the MessageSent message from the receipt.
- cctp_attestation (observe): Circle's API `GET /v2/messages/{sourceDomain}
  ?transactionHash=` until the burn's own message is attested (404 and
  "pending_confirmations" are pending, an outage is pending too).
- cctp_mint (action): `receiveMessage(message, attestation)` on the destination's
  MessageTransmitter.
- cctp_mint_status (observe): the mint's receipt and its MintAndWithdraw event.

Recovery decides from the chains: the burn by its write-ahead transaction (one
burn per movement: a second attempt happens only when the first provably cannot
land), the mint by the destination's `usedNonces(keccak(sourceDomain, nonce))` —
set means minted, and the transmitter itself refuses a second receiveMessage.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpx
import trio

from qtg.db import Database
from qtg.domain import bounded_json
from qtg.domain.cctp import (
    MESSAGE_RECEIVED,
    Chain,
    attestation_from_body,
    chain_for_domain,
    decode_message,
    deposit_for_burn_data,
    message_from_logs,
    message_hash,
    minted_from_logs,
    receive_message_data,
    used_nonces_data,
)
from qtg.domain.context import ExecutionContext
from qtg.domain.evm import intent_problem, is_address, to_base_units
from qtg.providers.base import (
    HealthReport,
    HealthState,
    IntentRejected,
    ObserveResult,
    ObserveStatus,
    PreflightError,
    PreparedAction,
    RecoverOutcome,
    RecoverResult,
)
from qtg.providers.evm import nonces as evm_nonces
from qtg.providers.evm.contract_action import ContractActionExecutor, from_observation
from qtg.providers.evm.outcome import (
    REBROADCAST_EVERY_SECONDS,
    ChainJudge,
)
from qtg.providers.evm.rpc import EvmRpc, RpcError, transient_rpc_faults
from qtg.providers.evm.signer import EvmSigner
from qtg.providers.evm.transactions import (
    allowance_raise_call,
    contract_call_tx,
)

EXECUTOR_KEY = "cctp"
ACTION_TYPES = frozenset({"cctp_burn", "cctp_attestation", "cctp_mint", "cctp_mint_status"})
USDC_DECIMALS = 6
#: depositForBurn's gas when it cannot be estimated (its allowance raise is not mined yet)
BURN_GAS = 300_000
#: receiveMessage's gas when it cannot be estimated
MINT_GAS = 300_000
#: blocks back from the head searched for a MessageReceived of another's mint
RECEIVED_LOG_WINDOW = 50_000


class CctpExecutor(ContractActionExecutor):
    key = EXECUTOR_KEY
    action_types = ACTION_TYPES
    prefix = "CCTP"
    no_effect_code = "CCTP_NO_MESSAGE"
    no_effect_detail = (
        "the burn was mined with status 1 but has no MessageSent log of the configured "
        "transmitter: a person decides"
    )

    def __init__(
        self,
        db: Database,
        rpcs: dict[int, EvmRpc],
        signer: EvmSigner,
        judge: ChainJudge,
        chains: dict[int, Chain],
        *,
        attestation_url: str,
        attestation_timeout: float,
        attestation_poll: float,
        mint_poll: float,
    ) -> None:
        self._db = db
        self._rpcs = rpcs
        self._signer = signer
        self._judge = judge
        self._chains = chains
        self._api = attestation_url.rstrip("/")
        self._api_timeout = attestation_timeout
        self._attestation_poll = attestation_poll
        self._mint_poll = mint_poll
        self._http = httpx.AsyncClient(timeout=attestation_timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    # ---------------------------------------------------------------- helpers
    def _chain(self, chain_id: Any, what: str) -> Chain:
        chain = self._chains.get(chain_id) if isinstance(chain_id, int) else None
        if chain is None or chain_id not in self._rpcs:
            raise PreflightError(
                f"cctp.{what} {chain_id!r} names no chain in MG_CCTP_CHAINS and MG_EVM_RPC_URLS",
                code="CCTP_CHAIN_UNKNOWN",
            )
        return chain

    def _burn(self, ctx: ExecutionContext) -> tuple[Chain, Chain, dict[str, Any]]:
        cfg = dict(ctx.node_config.get("cctp") or {})
        source = self._chain(cfg.get("source_chain_id"), "source_chain_id")
        dest = self._chain(cfg.get("destination_chain_id"), "destination_chain_id")
        if source.chain_id == dest.chain_id:
            raise PreflightError(
                "cctp: source and destination chains are the same", code="CCTP_SAME_CHAIN"
            )
        recipient = ctx.intent.get("destination", cfg.get("destination"))
        if not is_address(recipient):
            raise PreflightError(
                f"destination {recipient!r} is not an address", code="CCTP_BAD_DESTINATION"
            )
        try:
            amount = to_base_units(
                str(ctx.intent.get("amount", cfg.get("amount"))),
                int(cfg.get("decimals", USDC_DECIMALS)),
            )
        except ValueError as exc:
            raise PreflightError(str(exc), code="CCTP_BAD_AMOUNT") from None
        return source, dest, {"recipient": recipient.lower(), "amount": amount}

    async def _minted(self, dest: Chain, source_domain: int, nonce: int) -> bool:
        """The destination transmitter's usedNonces for the message: set once received."""
        raw = await self._rpcs[dest.chain_id].eth_call(
            dest.message_transmitter, used_nonces_data(source_domain, nonce)
        )
        return int(raw, 16) != 0

    # --------------------------------------------------------------- contract
    def check_intent(self, intent: Mapping[str, Any], node_config: Mapping[str, Any]) -> None:
        """At movement creation: a recipient that is no address, or an amount USDC
        cannot express (more than 6 decimals), is refused before anyone approves it."""
        cfg = node_config.get("cctp")
        decimals = cfg.get("decimals", USDC_DECIMALS) if isinstance(cfg, Mapping) else 6
        problem = intent_problem(intent, decimals)
        if problem is not None:
            field, message, code = problem
            raise IntentRejected(field, message, code=code.replace("EVM_", "CCTP_"))

    async def preflight(self, ctx: ExecutionContext) -> None:
        with transient_rpc_faults("preflight"):  # a wait, not a failure (issue 24)
            await self._preflight(ctx)

    async def _preflight(self, ctx: ExecutionContext) -> None:
        if ctx.action_type == "cctp_burn":
            source, _, _ = self._burn(ctx)
            rpc = self._rpcs[source.chain_id]
            if await rpc.chain_id_on_chain() != source.chain_id:
                raise PreflightError(
                    f"chain at {rpc.url} is not chain {source.chain_id}",
                    code="CCTP_CHAIN_MISMATCH",
                )
        elif ctx.action_type == "cctp_mint":
            self._mint_input(ctx)

    async def prepare(self, ctx: ExecutionContext) -> PreparedAction:
        with transient_rpc_faults("prepare"):  # a wait, not a failure (issue 24)
            return await self._prepare(ctx)

    async def _prepare(self, ctx: ExecutionContext) -> PreparedAction:
        if ctx.action_type == "cctp_mint":
            return await self._prepare_mint(ctx)
        source, dest, b = self._burn(ctx)
        rpc = self._rpcs[source.chain_id]
        owner = self._signer.address
        # raised by the amount where USDC can (increaseAllowance), else approve(current +
        # amount) on the nonce right below the burn (evm_nonces.reserve_run): nothing of
        # ours runs between them, so burns prepared side by side never spend each other's
        raise_call = await allowance_raise_call(
            rpc, source.usdc, owner, source.token_messenger, b["amount"]
        )
        nonce, approvals = await self._reserve_with_raise(ctx, rpc, source.chain_id, raise_call)
        call = {
            "from": owner,
            "to": source.token_messenger,
            "data": deposit_for_burn_data(b["amount"], dest.domain, b["recipient"], source.usdc),
        }
        tx = await contract_call_tx(
            rpc, self._judge, source.chain_id, call, nonce, gas=BURN_GAS if approvals else None
        )
        tx["qtg"] = {
            "destination_chain_id": dest.chain_id,
            "destination_domain": dest.domain,
            "recipient": b["recipient"],
            "amount": str(b["amount"]),
            "approvals": approvals,
        }
        return self._prepared(ctx, tx)

    def _mint_input(self, ctx: ExecutionContext) -> tuple[Chain, str, str]:
        refs = {**ctx.provider_context, **ctx.node_provider_refs}
        message, attestation = refs.get("message"), refs.get("attestation")
        if not isinstance(message, str) or not isinstance(attestation, str):
            raise PreflightError(
                "cctp_mint needs a cctp_attestation before it (message, attestation)",
                code="CCTP_NO_ATTESTATION",
            )
        decoded = decode_message(message)
        dest = chain_for_domain(self._chains, decoded.destination_domain)
        if dest is None or dest.chain_id not in self._rpcs:
            raise PreflightError(
                f"domain {decoded.destination_domain} names no chain in MG_CCTP_CHAINS",
                code="CCTP_CHAIN_UNKNOWN",
            )
        return dest, message, attestation

    async def _prepare_mint(self, ctx: ExecutionContext) -> PreparedAction:
        dest, message, attestation = self._mint_input(ctx)
        rpc = self._rpcs[dest.chain_id]
        call = {
            "from": self._signer.address,
            "to": dest.message_transmitter,
            "data": receive_message_data(message, attestation),
        }
        nonce = await self._reserve(rpc, dest.chain_id, ctx.request_node_id, ctx.attempt_no)
        try:
            tx = await contract_call_tx(rpc, self._judge, dest.chain_id, call, nonce)
        except (
            RpcError
        ):  # e.g. already received: it reverts, and observe settles it from usedNonces
            tx = await contract_call_tx(rpc, self._judge, dest.chain_id, call, nonce, gas=MINT_GAS)
        decoded = decode_message(message)
        tx["qtg"] = {"source_domain": decoded.source_domain, "cctp_nonce": decoded.nonce}
        return self._prepared(ctx, tx)

    # ---------------------------------------------------------------- observe
    async def observe(self, ctx: ExecutionContext) -> ObserveResult:
        if ctx.action_type == "cctp_attestation":
            return await self._observe_attestation(ctx)
        if ctx.action_type == "cctp_mint_status":
            return await self._observe_mint_status(ctx)
        refs = dict(ctx.node_provider_refs)
        seen = await self._look(ctx, refs)
        return await self._settle(ctx, refs, seen, rebroadcast_within=REBROADCAST_EVERY_SECONDS)

    def _effect(
        self, ctx: ExecutionContext, refs: Mapping[str, Any]
    ) -> Callable[[dict[str, Any]], bool] | None:
        """A burn counts only with its MessageSent; a mint by its receipt's status."""
        if ctx.action_type != "cctp_burn":
            return None
        transmitter = self._chains[int(refs["chain_id"])].message_transmitter

        def effect(receipt: dict[str, Any]) -> bool:  # the burn's MessageSent is there
            return message_from_logs(receipt.get("logs") or [], transmitter) is not None

        return effect

    async def _mined(
        self, ctx: ExecutionContext, refs: dict[str, Any], receipt: dict[str, Any]
    ) -> ObserveResult:
        if ctx.action_type == "cctp_burn":
            return await self._burn_mined(ctx, refs, receipt)
        return await self._mint_mined(ctx, refs, receipt)

    async def _burn_mined(
        self, ctx: ExecutionContext, refs: dict[str, Any], receipt: dict[str, Any]
    ) -> ObserveResult:
        await self._consume(ctx, refs)
        block = int(receipt["blockNumber"], 16)
        artifacts = {"burn_tx_hash": refs["tx_hash"], "block_number": block}
        if int(receipt["status"], 16) != 1:
            # a reverted depositForBurn reverts its transferFrom and burn too: nothing moved
            return ObserveResult(
                status=ObserveStatus.FAILED,
                artifacts=artifacts,
                error_code="CCTP_BURN_REVERTED",
                error_detail="depositForBurn reverted: nothing was burned",
            )
        source = self._chains[int(refs["chain_id"])]
        message = message_from_logs(receipt.get("logs") or [], source.message_transmitter)
        if message is None:
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                error_code="CCTP_NO_MESSAGE",
                error_detail="the mined burn has no MessageSent log of the configured transmitter",
            )
        decoded = decode_message(message)
        burned = {
            "source_chain_id": source.chain_id,
            "source_domain": decoded.source_domain,
            "destination_domain": decoded.destination_domain,
            "cctp_nonce": decoded.nonce,
            "burn_tx_hash": refs["tx_hash"],
            "message": message,
            "message_hash": message_hash(message),
            "recipient": decoded.mint_recipient,
            "amount": str(decoded.amount),
        }
        return ObserveResult(
            status=ObserveStatus.COMPLETED,
            provider_refs=burned,
            artifacts={**artifacts, **{k: v for k, v in burned.items() if k != "message"}},
        )

    async def _observe_attestation(self, ctx: ExecutionContext) -> ObserveResult:
        refs = {**ctx.provider_context, **ctx.node_provider_refs}
        burn_tx, domain, message = (
            refs.get("burn_tx_hash"),
            refs.get("source_domain"),
            refs.get("message"),
        )
        if not burn_tx or domain is None or not message:
            return ObserveResult(
                status=ObserveStatus.FAILED,
                error_code="CCTP_NO_BURN",
                error_detail="cctp_attestation needs a cctp_burn before it",
            )
        carried: dict[str, Any] = {
            k: refs[k]
            for k in (
                "source_chain_id",
                "source_domain",
                "destination_domain",
                "cctp_nonce",
                "burn_tx_hash",
                "message",
                "message_hash",
                "recipient",
                "amount",
            )
            if k in refs
        }
        pending = ObserveResult(
            status=ObserveStatus.PENDING,
            provider_refs=carried,
            retry_after_seconds=self._attestation_poll,
        )
        url = f"{self._api}/v2/messages/{int(domain)}"
        try:
            with trio.fail_after(self._api_timeout):
                reply = await self._http.get(url, params={"transactionHash": burn_tx})
        except (httpx.HTTPError, trio.TooSlowError):
            return pending  # the API is down or slow: the burn is on chain, ask again later
        if reply.status_code == 404 or reply.status_code >= 500 or reply.status_code == 429:
            return pending  # 404: not observed yet (Circle's documented answer)
        if reply.status_code != 200:
            return ObserveResult(
                status=ObserveStatus.PENDING,
                provider_refs=carried,
                retry_after_seconds=self._attestation_poll,
                error_code="CCTP_ATTESTATION_HTTP",
                error_detail=f"attestation API answered HTTP {reply.status_code}",
            )
        try:
            body = bounded_json.loads(reply.content)
        except ValueError:
            return pending
        found = attestation_from_body(body, message)
        if found is None or found.attestation is None:
            return pending
        done = {**carried, "attestation": found.attestation}
        return ObserveResult(
            status=ObserveStatus.COMPLETED,
            provider_refs=done,
            artifacts={
                "message_hash": carried.get("message_hash"),
                "attestation_status": found.status,
            },
        )

    async def _mint_mined(
        self, ctx: ExecutionContext, refs: dict[str, Any], receipt: dict[str, Any]
    ) -> ObserveResult:
        await self._consume(ctx, refs)
        dest = self._chains[int(refs["chain_id"])]
        block = int(receipt["blockNumber"], 16)
        done = {**_mint_refs(ctx), "mint_tx_hash": refs["tx_hash"], "mint_block": block}
        if int(receipt["status"], 16) == 1:
            return ObserveResult(status=ObserveStatus.COMPLETED, provider_refs=done, artifacts=done)
        source_domain, nonce = (
            int(refs.get("source_domain", done["source_domain"])),
            int(done["cctp_nonce"]),
        )
        if await self._minted(dest, source_domain, nonce):
            # another receiveMessage (a relayer, an earlier attempt) used the nonce: minted once
            done["mint_tx_hash"] = None
            return ObserveResult(status=ObserveStatus.COMPLETED, provider_refs=done, artifacts=done)
        return ObserveResult(
            status=ObserveStatus.FAILED,
            provider_refs=done,
            error_code="CCTP_MINT_REVERTED",
            error_detail="receiveMessage reverted and the message's nonce is unused: no mint",
        )

    async def _observe_mint_status(self, ctx: ExecutionContext) -> ObserveResult:
        refs = {**ctx.provider_context, **ctx.node_provider_refs}
        message = refs.get("message")
        if not message:
            return ObserveResult(
                status=ObserveStatus.FAILED,
                error_code="CCTP_NO_MINT",
                error_detail="cctp_mint_status needs a cctp_mint before it",
            )
        decoded = decode_message(message)
        dest = chain_for_domain(self._chains, decoded.destination_domain)
        if dest is None:
            return ObserveResult(
                status=ObserveStatus.FAILED,
                error_code="CCTP_CHAIN_UNKNOWN",
                error_detail=f"domain {decoded.destination_domain} is not in MG_CCTP_CHAINS",
            )
        rpc = self._rpcs[dest.chain_id]
        pending = ObserveResult(status=ObserveStatus.PENDING, retry_after_seconds=self._mint_poll)
        if not await self._minted(dest, decoded.source_domain, decoded.nonce):
            return pending
        # the receiving transaction: ours, else the MessageReceived log of this nonce
        tx_hash = refs.get("mint_tx_hash")
        receipt = await rpc.receipt(tx_hash) if tx_hash else None
        if receipt is None or int(receipt["status"], 16) != 1:
            height = await rpc.block_number()
            logs = await rpc.call(
                "eth_getLogs",
                {
                    "address": dest.message_transmitter,
                    "topics": [MESSAGE_RECEIVED, None, "0x" + f"{decoded.nonce:064x}"],
                    # a window, not the whole chain: the mint is recent when this runs
                    "fromBlock": hex(max(0, height - RECEIVED_LOG_WINDOW)),
                },
            )
            for log in logs or []:
                if int(log["data"][2:66], 16) == decoded.source_domain:
                    receipt = await rpc.receipt(log["transactionHash"])
                    break
        if receipt is None:
            return pending  # usedNonces is set; the node will show its log shortly
        minted = minted_from_logs(
            receipt.get("logs") or [], dest.token_messenger, decoded.mint_recipient, dest.usdc
        )
        found = {
            "mint_tx_hash": receipt["transactionHash"],
            "mint_block": int(receipt["blockNumber"], 16),
            "destination_chain_id": dest.chain_id,
            "recipient": decoded.mint_recipient,
        }
        if minted != decoded.amount:
            return ObserveResult(
                status=ObserveStatus.UNKNOWN,
                provider_refs=found,
                error_code="CCTP_MINT_MISMATCH",
                error_detail=f"the receiving transaction minted {minted}, burned {decoded.amount}",
            )
        return ObserveResult(
            status=ObserveStatus.COMPLETED,
            provider_refs=found,
            artifacts={**found, "minted": str(minted), "token": dest.usdc},
        )

    # ---------------------------------------------------------------- recover
    async def recover(self, ctx: ExecutionContext) -> RecoverResult:
        if ctx.action_type in ("cctp_attestation", "cctp_mint_status"):  # watching only
            return from_observation(await self.observe(ctx))
        if ctx.action_type == "cctp_mint":
            dest, message, _ = self._mint_input(ctx)
            decoded = decode_message(message)
            if await self._minted(dest, decoded.source_domain, decoded.nonce):
                # the chain says minted: done, whatever our own transaction became
                row = await evm_nonces.for_attempt(
                    self._db, request_node_id=ctx.request_node_id, attempt_no=ctx.attempt_no
                )
                done = {**_mint_refs(ctx), "mint_tx_hash": row["tx_hash"] if row else None}
                if row is not None and row["tx_hash"]:
                    receipt = await self._rpcs[dest.chain_id].receipt(row["tx_hash"])
                    if receipt is not None:
                        refs = {
                            "chain_id": dest.chain_id,
                            "tx_hash": row["tx_hash"],
                            "from": row["address"],
                            "nonce": row["nonce"],
                        }
                        await self._consume(ctx, refs)
                return RecoverResult(
                    outcome=RecoverOutcome.COMPLETED, provider_refs=done, artifacts=done
                )
        return await self._recover_tx(ctx)

    async def health(self) -> HealthReport:
        detail: dict[str, Any] = {}
        state = HealthState.HEALTHY
        for chain_id, chain in self._chains.items():
            try:
                code = await self._rpcs[chain_id].call(
                    "eth_getCode", chain.message_transmitter, "latest"
                )
                detail[str(chain_id)] = {"transmitter_has_code": code not in ("0x", None)}
            except Exception as exc:  # a chain that does not answer degrades, never crashes
                detail[str(chain_id)] = {"error": type(exc).__name__}
                state = HealthState.DEGRADED
        return HealthReport(state=state, detail=detail, signer_address=self._signer.address)


def _mint_refs(ctx: ExecutionContext) -> dict[str, Any]:
    """What the mint carries forward to its status observe: the burn's facts."""
    refs = {**ctx.provider_context, **ctx.node_provider_refs}
    keep = (
        "source_chain_id",
        "source_domain",
        "destination_domain",
        "cctp_nonce",
        "burn_tx_hash",
        "message",
        "message_hash",
        "recipient",
        "amount",
    )
    return {k: refs[k] for k in keep if k in refs}
