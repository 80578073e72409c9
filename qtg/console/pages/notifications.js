// Notifications (paged), with "resolve" for operators.

import { api } from "../api.js";
import { errorBox, field, h, mount, select, when } from "../dom.js";
import { filterForm, filtersOf, pagedTable } from "../list.js";

export default {
  path: "notifications",
  title: "Notifications",
  nav: true,
  async render(main, ctx) {
    const filters = filtersOf(ctx, ["open", "kind"]);
    const out = h("div#notification-result");
    const form = filterForm(ctx, "notifications", [
      field("Open", select("open", [["", "any"], ["true", "open"], ["false", "resolved"]], filters.open || "")),
      field("Kind", h("input", { name: "kind", value: filters.kind || "", placeholder: "request_attention" })),
    ]);
    const resolve = async (n) => {
      const r = await api("POST", `/v3/notifications/${n.id}/resolve`, { body: {} });
      if (r.ok) ctx.refresh();
      else mount(out, errorBox(r));
    };
    const table = await pagedTable(ctx, {
      path: "notifications",
      endpoint: "/v3/notifications",
      filters,
      rowProps: (n) => ({ class: n.resolved_at ? null : `sev-${n.severity}` }),
      columns: [
        ["#", (n) => String(n.id)],
        ["Severity", (n) => h("span.badge", { class: `sev-${n.severity}` }, n.severity)],
        ["Kind", (n) => n.kind],
        ["Subject", (n) => h("details", h("summary", n.subject), h("pre.json", n.body))],
        ["Movement", (n) => (n.request_id ? h("a.mono", { href: `#/movements/${n.request_id}` }, n.request_id.slice(0, 8)) : "—")],
        ["Times", (n) => String(n.occurrences)],
        ["Last raised", (n) => when(n.last_raised_at)],
        ["Resolved", (n) => (n.resolved_at ? when(n.resolved_at)
          : ctx.session.may("operator") ? h("button", { type: "button", onclick: () => resolve(n) }, "resolve") : "open")],
      ],
    });
    mount(main, h("h1", "Notifications"), form, out, table);
  },
};
