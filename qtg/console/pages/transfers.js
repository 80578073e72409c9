// Capital transfers (treasury requests that become movements), paged by the API's cursor.

import { field, h, mount, select, stateBadge, when } from "../dom.js";
import { filterForm, filtersOf, pagedTable } from "../list.js";

const STATUSES = ["pending", "movement_created", "completed", "failed", "needs_attention"];

export default {
  path: "transfers",
  title: "Transfers",
  nav: true,
  async render(main, ctx) {
    const filters = filtersOf(ctx, ["status"]);
    const form = filterForm(ctx, "transfers", [
      field("Status", select("status", [["", "any"], ...STATUSES.map((s) => [s, s])], filters.status || "")),
    ]);
    const table = await pagedTable(ctx, {
      path: "transfers",
      endpoint: "/v3/capital-transfers",
      filters,
      rowProps: (t) => ({ class: t.status === "failed" || t.status === "needs_attention" ? "warn" : null }),
      columns: [
        ["Amount", (t) => h("span.num", `${t.amount} ${t.asset}`)],
        ["From", (t) => h("span.mono", t.source)],
        ["To", (t) => h("span.mono", t.destination)],
        ["Status", (t) => t.status],
        ["Movement", (t) => (t.request_id
          ? [h("a.mono", { href: `#/movements/${t.request_id}` }, t.request_id.slice(0, 8)), " ", t.request_state ? stateBadge(t.request_state) : null]
          : "—")],
        ["Template", (t) => t.template_key],
        ["By", (t) => t.created_by],
        ["Created", (t) => when(t.created_at)],
        ["Error", (t) => h("span.error-text", t.last_error || "")],
      ],
    });
    mount(main, h("h1", "Capital transfers"), form, table);
  },
};
