// Movements, newest first, filtered by state and template, paged by the API's cursor.
// The first page follows the stream: a movement created or changing state
// re-reads that one page (at most once a second, however busy the runtime).

import { follow } from "../api.js";
import { field, h, mount, select, stateBadge, when } from "../dom.js";
import { filterForm, filtersOf, pagedTable } from "../list.js";

export const REQUEST_STATES = [
  "PENDING_APPROVAL", "APPROVED", "REJECTED", "EXPIRED", "EXECUTING",
  "WAITING_MANUAL_ACTION", "MANUAL_INTERVENTION", "COMPLETED", "FAILED", "CANCELLED",
];

const RELOAD_MS = 1000;

export default {
  path: "movements",
  title: "Movements",
  nav: true,
  async render(main, ctx) {
    const filters = filtersOf(ctx, ["state", "template_key"]);
    const form = filterForm(ctx, "movements", [
      field("State", select("state", [["", "any"], ...REQUEST_STATES.map((s) => [s, s])], filters.state || "")),
      field("Template", h("input", { name: "template_key", value: filters.template_key || "", placeholder: "demo.cctp_bridge" })),
    ]);
    const load = (reread = false) => pagedTable(ctx, {
      reread,
      path: "movements",
      endpoint: "/v3/movements",
      filters,
      rowProps: (m) => ({ class: "link-row", dataset: { id: m.id, state: m.request_state } }),
      columns: [
        ["Movement", (m) => h("a.mono", { href: `#/movements/${m.id}` }, m.id.slice(0, 8))],
        ["Template", (m) => `${m.template_key} v${m.template_version}`],
        ["State", (m) => stateBadge(m.request_state)],
        ["Frontier", (m) => (m.current_frontier || []).join(", ") || "—"],
        ["Amount", (m) => `${m.intent.amount ?? ""} ${m.intent.asset ?? ""}`],
        ["Created by", (m) => m.created_by],
        ["Approved by", (m) => m.approved_by || "—"],
        ["Created", (m) => when(m.created_at)],
        ["Updated", (m) => when(m.updated_at)],
      ],
    });
    const body = h("div#movements-page", await load());
    mount(main, h("h1", "Movements"), form, body);
    if (ctx.query.get("cursor")) return null; // a later page stays as it was read
    let timer = null;
    let busy = false;
    let stopped = false;
    const reload = async () => {
      timer = null;
      if (stopped) return;
      if (busy) {
        timer = setTimeout(reload, RELOAD_MS);
        return;
      }
      busy = true;
      const table = await load(true);
      if (!stopped) mount(body, table);
      busy = false;
    };
    const soon = () => {
      if (timer === null) timer = setTimeout(reload, RELOAD_MS);
    };
    const stop = follow({
      types: "request_created,request_state_changed",
      onEvent: soon,
      // Once (re)connected, read again: a movement created between the page's
      // read and the subscription would otherwise wait for the next event.
      onStatus: (st) => st === "live" && soon(),
    });
    return () => {
      stopped = true;
      clearTimeout(timer);
      stop();
    };
  },
};
