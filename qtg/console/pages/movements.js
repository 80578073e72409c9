// Movements, newest first, filtered by state and template, paged by the API's cursor.

import { field, h, mount, select, stateBadge, when } from "../dom.js";
import { filterForm, filtersOf, pagedTable } from "../list.js";

export const REQUEST_STATES = [
  "PENDING_APPROVAL", "APPROVED", "REJECTED", "EXPIRED", "EXECUTING",
  "WAITING_MANUAL_ACTION", "MANUAL_INTERVENTION", "COMPLETED", "FAILED", "CANCELLED",
];

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
    const table = await pagedTable(ctx, {
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
    mount(main, h("h1", "Movements"), form, table);
  },
};
