// One movement: its DAG (live from WS /v3/stream), node detail, the decisions
// the caller's role allows, and its event log. Every decision calls the API
// route as it is; a refusal (four-eyes included) is shown as the API's body.

import { api, follow } from "../api.js";
import { errorBox, h, json, mount, stateBadge, when } from "../dom.js";
import { draw, legend } from "../graph.js";

const CANCELLABLE = new Set([
  "PENDING_APPROVAL", "APPROVED", "EXECUTING", "WAITING_MANUAL_ACTION", "MANUAL_INTERVENTION",
]);
const RESUMABLE = new Set(["MANUAL_INTERVENTION", "WAITING_MANUAL_ACTION"]);
const MAX_EVENTS = 300;

// How the treasury policy governs a movement (docs/policies.md): its rule, the
// approvals given and still needed, each accumulation window's use, the delay left.
const policyFacts = (policy) => {
  if (!policy) return [];
  const ask = policy.approvals || {};
  const from = ask.group ? `group ${ask.group}` : `role ${ask.role || "operator"}`;
  const counted = (policy.approvals_given || []).filter((a) => a.counted).map((a) => a.principal);
  const windows = (policy.accumulation || []).map((w) =>
    `${w.rule}: ${w.used} of ${w.limit ?? "—"} in ${w.window_seconds}s (${w.scope})`);
  return [
    h("dt", "Policy"), h("dd#policy-rule", `v${policy.version} · rule ${policy.rule}`),
    h("dt", "Approvals"), h("dd#policy-approvals",
      `${counted.length} of ${ask.count} from ${from}` +
      (counted.length ? ` (${counted.join(", ")})` : "") +
      (policy.approvals_needed ? ` · ${policy.approvals_needed} still needed` : "")),
    h("dt", "Accumulation"), h("dd#policy-accumulation", windows.join("; ") || "—"),
    h("dt", "Charged"), h("dd", policy.charged ?? "—"),
    h("dt", "Delay left"), h("dd#policy-delay",
      policy.delay_seconds ? `${Math.ceil(policy.delay_left_seconds)}s of ${policy.delay_seconds}s` : "—"),
  ];
};

/** The movement-level decisions worth offering in a state (the API decides in the end).
 * `mine`: the signed-in principal created the movement, and four-eyes forbids the
 * creator to approve it: no approve button that the API would only refuse. */
export function decisionsFor(state, mine = false) {
  const out = [];
  if (state === "PENDING_APPROVAL") out.push(...(mine ? ["reject"] : ["approve", "reject"]));
  if (RESUMABLE.has(state)) out.push("resume");
  if (CANCELLABLE.has(state)) out.push("cancel");
  return out;
}

function seconds(from, to) {
  if (!from || !to) return null;
  return (new Date(to) - new Date(from)) / 1000;
}

export default {
  path: "movements/:id",
  title: "Movement",
  nav: false,
  async render(main, ctx) {
    const id = ctx.params.id;
    const canAct = ctx.session.may("operator");
    let movement = null;
    let selected = ctx.query.get("node") || null;

    const title = h("h1", "Movement ", h("span.mono", id));
    const status = h("span#stream-status.stream", { dataset: { status: "connecting" } }, "connecting");
    const summary = h("div.summary");
    const actions = h("div#actions.actions");
    const outcome = h("div#action-result");
    const graphBox = h("div#graph.graph-scroll");
    const detail = h("aside#node-detail.detail");
    const log = h("ol#events.events");
    mount(main,
      h("div.title-row", title, status),
      summary,
      actions,
      outcome,
      h("section.card", h("div.card-head", h("h2", "Graph"), legend()), graphBox),
      h("div.split", detail,
        h("section.card.log", h("h2", "Events"), log)));

    // An error shown in `outcome` belongs to the state the movement was in when
    // it was shown: once the movement moves on (someone else approved, the
    // node got completed), a "403 FOUR_EYES" left standing would describe a
    // decision nobody can take any more, so it is cleared (see paintSummary).
    let errorShownAt = null;
    const showError = (box) => {
      mount(outcome, box);
      errorShownAt = movement.request_state;
    };

    const decide = async (label, path, body) => {
      errorShownAt = null;
      mount(outcome, h("p.muted", `${label}…`));
      const r = await api("POST", path, { body: body ?? {} });
      if (r.ok) {
        movement = r.body;
        mount(outcome, h("p.ok#action-ok", `${label}: done, movement is ${r.body.request_state}`));
        paint();
      } else {
        showError(errorBox(r));
      }
    };

    // A resolution answers 202 (proposed: nothing moved yet) or 200 (confirmed
    // by a second operator: applied), with the movement as it now is.
    const resolve = async (key, path, body) => {
      mount(outcome, h("p.muted", `resolve ${key}…`));
      const r = await api("POST", path, { body });
      if (!r.ok) {
        mount(outcome, errorBox(r));
        return;
      }
      movement = r.body.movement;
      const res = r.body.resolution;
      mount(outcome, h("p.ok#action-ok", { dataset: { resolution: res.status } },
        res.status === "proposed"
          ? `resolve ${key}: ${res.outcome} proposed by ${res.proposed_by}; a second operator must confirm it`
          : `resolve ${key}: ${res.outcome} confirmed by ${res.confirmed_by} (proposed by ${res.proposed_by}), movement is ${movement.request_state}`));
      paint();
    };

    // Inputs live across repaints (live events repaint often): what a person
    // is typing is never thrown away by an update.
    const reason = h("input#reason", { name: "reason", placeholder: "reason (reject / cancel)" });
    const artifacts = h("textarea#artifacts", { rows: 3, placeholder: '{"note": "checked by hand"}' });
    // The Resolve control (issue 25): an UNKNOWN node settled by hand, four-eyes.
    const resolveOutcome = h("select#resolve-outcome", { name: "outcome" },
      h("option", { value: "COMPLETED" }, "COMPLETED (it happened)"),
      h("option", { value: "FAILED" }, "FAILED (no money moved)"));
    const resolveEvidence = h("input#resolve-evidence", {
      name: "evidence", placeholder: "evidence: tx hash, venue statement, ticket",
    });
    const resolveRefs = h("textarea#resolve-refs", { rows: 2, placeholder: '{"tx_hash": "0x…"} (optional)' });
    let resolveFor = null;
    let artifactsFor = null;
    let shownDecisions = null;
    let shownDetail = null;

    const paintActions = () => {
      // Unchanged decisions are left alone, so the reason field keeps its focus.
      const mine = !!ctx.session.principal && movement.created_by === ctx.session.principal.name;
      const decisions = decisionsFor(movement.request_state, mine);
      const offered = `${canAct}:${mine}:${decisions.join()}`;
      if (offered === shownDecisions) return;
      shownDecisions = offered;
      if (!canAct) {
        mount(actions, h("p.muted", "Viewer: no actions."));
        return;
      }
      const base = `/v3/movements/${id}`;
      const buttons = decisions.map((d) => {
        const withReason = d === "reject" || d === "cancel";
        return h(`button#act-${d}`, {
          type: "button",
          class: d === "approve" || d === "resume" ? "primary" : d === "reject" || d === "cancel" ? "danger" : null,
          onclick: () => {
            // Reject and cancel end the movement for good: ask first.
            if (withReason && !window.confirm(`${d} movement ${id}?`)) return;
            decide(d, `${base}/${d}`, withReason && reason.value ? { reason: reason.value } : {});
          },
        }, d);
      });
      const fourEyes = mine && movement.request_state === "PENDING_APPROVAL"
        ? [h("p.muted#four-eyes-note", "You created this movement: another operator approves it (four-eyes).")]
        : [];
      mount(actions, buttons.length ? [...buttons, reason, ...fourEyes] : h("p.muted", "No decisions in this state."));
    };

    const paintSummary = () => {
      if (errorShownAt !== null && movement.request_state !== errorShownAt) {
        errorShownAt = null;
        mount(outcome);
      }
      mount(title, "Movement ", h("span.mono", id), " ", stateBadge(movement.request_state));
      title.dataset.state = movement.request_state;
      const intent = movement.intent || {};
      mount(summary, h("dl.facts",
        h("dt", "Template"), h("dd", `${movement.template_key} v${movement.template_version}`),
        h("dt", "Intent"), h("dd", `${intent.amount ?? ""} ${intent.asset ?? ""} → `, h("span.mono", intent.destination ?? "")),
        h("dt", "Created by"), h("dd", movement.created_by),
        h("dt", "Approved by"), h("dd", movement.approved_by || "—"),
        h("dt", "Decided by"), h("dd", movement.decided_by || "—"),
        h("dt", "Frontier"), h("dd#frontier", (movement.current_frontier || []).join(", ") || "—"),
        h("dt", "Created"), h("dd", when(movement.created_at)),
        h("dt", "Updated"), h("dd", when(movement.updated_at)),
        // The approval deadline means something only while the movement waits for it:
        // a COMPLETED movement showed "Expires" (issue 44).
        ...(movement.request_state === "PENDING_APPROVAL"
          ? [h("dt#expires-label", "Expires"), h("dd#expires", when(movement.expires_at))]
          : []),
        ...policyFacts(movement.policy)));
    };

    let shownGraph = null;
    const paintGraph = () => {
      // Redrawn only when something drawn changed: a click never lands on a
      // node that is being replaced by an identical one.
      const drawn = JSON.stringify([
        selected,
        movement.current_frontier,
        movement.nodes.map((n) => [n.node_key, n.node_state, n.attempt_no]),
      ]);
      if (drawn === shownGraph) return;
      shownGraph = drawn;
      const scroll = [graphBox.scrollLeft, graphBox.scrollTop];
      mount(graphBox, draw(movement, {
        selected,
        onSelect: (key) => {
          selected = key;
          paintGraph();
          paintDetail();
        },
      }));
      [graphBox.scrollLeft, graphBox.scrollTop] = scroll;
    };

    const paintDetail = () => {
      const node = movement.nodes.find((n) => n.node_key === selected);
      // The same node unchanged is left alone (the artifacts field keeps its focus).
      const signature = `${selected}:${JSON.stringify(node)}`;
      if (signature === shownDetail) return;
      shownDetail = signature;
      if (!node) {
        mount(detail, h("h2", "Node"), h("p.muted", "Click a node in the graph for its attempts, provider refs, errors and timings."));
        return;
      }
      const base = `/v3/movements/${id}/nodes/${encodeURIComponent(node.node_key)}`;
      const nodeActions = [];
      // retry only where FAILED is proven (failure_proven): a new attempt beside bytes
      // that can still be mined could pay twice; the API answers 409 FAILURE_NOT_PROVEN
      if (canAct && node.node_state === "FAILED" && node.failure_proven === true) {
        nodeActions.push(h("button#act-retry.primary", { type: "button", onclick: () => decide(`retry ${node.node_key}`, `${base}/retry`) }, "retry node"));
      }
      if (canAct && (node.node_state === "UNKNOWN" || node.node_state === "SUBMITTING")) {
        if (resolveFor !== node.node_key) {
          resolveEvidence.value = "";
          resolveRefs.value = "";
          resolveFor = node.node_key;
        }
        nodeActions.push(h("div#resolve.resolve",
          h("h3", "Resolve by hand"),
          h("p.muted", "What really happened to this attempt? One operator proposes, a second confirms the same outcome; then the movement goes on from it."),
          resolveOutcome, resolveEvidence, resolveRefs,
          h("button#act-resolve.primary", {
            type: "button",
            onclick: () => {
              let refs = {};
              try {
                refs = resolveRefs.value.trim() ? JSON.parse(resolveRefs.value) : {};
              } catch (e) {
                mount(outcome, h("div.error", { role: "alert" }, `provider refs: not JSON (${e.message})`));
                return;
              }
              resolve(node.node_key, `${base}/resolve`, {
                outcome: resolveOutcome.value, evidence: resolveEvidence.value, provider_refs: refs,
              });
            },
          }, "resolve node")));
      }
      if (canAct && node.node_kind === "manual" && node.node_state === "READY") {
        if (artifactsFor !== node.node_key) {
          artifacts.value = "";
          artifactsFor = node.node_key;
        }
        nodeActions.push(artifacts, h("button#act-complete.primary", {
          type: "button",
          onclick: () => {
            let parsed = {};
            try {
              parsed = artifacts.value.trim() ? JSON.parse(artifacts.value) : {};
            } catch (e) {
              showError(h("div.error", { role: "alert" }, `artifacts: not JSON (${e.message})`));
              return;
            }
            decide(`complete ${node.node_key}`, `${base}/complete`, { artifacts: parsed });
          },
        }, "complete manual node"));
      }
      const took = seconds(node.started_at, node.completed_at);
      mount(detail,
        h("h2", "Node ", h("span.mono", node.node_key), " ", stateBadge(node.node_state)),
        h("dl.facts",
          h("dt", "Kind"), h("dd", `${node.node_kind} · ${node.action_type}`),
          h("dt", "Attempts"), h("dd#node-attempts", String(node.attempt_no)),
          h("dt", "Observations"), h("dd", String(node.observe_count)),
          h("dt", "Started"), h("dd", when(node.started_at)),
          h("dt", "Submitted"), h("dd", when(node.submitted_at)),
          h("dt", "Completed"), h("dd", when(node.completed_at)),
          h("dt", "Took"), h("dd", took === null ? "—" : `${took.toFixed(3)} s`),
          h("dt", "Next observe"), h("dd", when(node.next_observe_at)),
          h("dt", "Updated"), h("dd", when(node.updated_at)),
          h("dt", "Error"), h("dd", node.error_code ? h("span.error-text", `${node.error_code}: ${node.error_detail || ""}`) : "—")),
        h("h3", "Provider refs"), json(node.provider_refs),
        h("h3", "Artifacts"), json(node.artifacts),
        nodeActions.length ? h("div.actions", nodeActions) : null);
    };

    const paint = () => {
      paintSummary();
      paintActions();
      paintGraph();
      paintDetail();
    };

    const paintEvent = (e) => {
      const item = h("li", { dataset: { id: e.id, type: e.event_type } },
        h("span.mono.muted", `#${e.id}`), " ", when(e.occurred_at), " ",
        h("strong", e.event_type), e.node_key ? [" ", h("span.mono", e.node_key)] : null,
        e.from_state || e.to_state ? [" ", e.from_state || "∅", " → ", e.to_state ? stateBadge(e.to_state) : "∅"] : null);
      log.prepend(item);
      while (log.childElementCount > MAX_EVENTS) log.lastElementChild.remove();
    };

    const r = await api("GET", `/v3/movements/${id}`);
    if (!r.ok) {
      mount(main, h("h1", "Movement ", h("span.mono", id)), errorBox(r));
      return null;
    }
    movement = r.body;
    paint();

    // Live: apply each event's state at once, then re-read the movement (one
    // read per burst of events) for what events do not carry: refs, attempts, errors.
    let refetching = false;
    let again = false;
    const refetch = async () => {
      if (refetching) {
        again = true;
        return;
      }
      refetching = true;
      do {
        again = false;
        const fresh = await api("GET", `/v3/movements/${id}`);
        if (fresh.ok) {
          movement = fresh.body;
          paint();
        }
      } while (again);
      refetching = false;
    };
    const stop = follow({
      requestId: id,
      after: 0,
      onStatus: (st) => {
        status.dataset.status = st;
        status.textContent = st;
      },
      onEvent: (e) => {
        paintEvent(e);
        if (!e.to_state) return;
        // Only an event that starts where the page stands moves it: the
        // backlog's old transitions (the stream starts at the first event) are
        // history, not news; the re-read settles anything missed.
        let changed = false;
        if (e.event_type === "node_state_changed") {
          const node = movement.nodes.find((n) => n.node_key === e.node_key);
          if (node && node.node_state === e.from_state) {
            node.node_state = e.to_state;
            changed = true;
          }
        } else if (e.event_type === "request_state_changed" && movement.request_state === e.from_state) {
          movement.request_state = e.to_state;
          changed = true;
        }
        if (changed) {
          paintGraph();
          paintSummary();
          paintActions();
        }
        refetch();
      },
    });
    return stop;
  },
};
