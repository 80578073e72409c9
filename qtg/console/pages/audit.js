// The audit log, newest first: filters and cursor paging, as the API offers them.

import { field, h, json, mount, when } from "../dom.js";
import { filterForm, filtersOf, pagedTable } from "../list.js";

const FILTERS = ["object_type", "object_id", "actor", "action"];

export default {
  path: "audit",
  title: "Audit",
  nav: true,
  async render(main, ctx) {
    const filters = filtersOf(ctx, FILTERS);
    const form = filterForm(ctx, "audit", FILTERS.map((f) =>
      field(f.replace("_", " "), h("input", { name: f, value: filters[f] || "" }))));
    const table = await pagedTable(ctx, {
      path: "audit",
      endpoint: "/v3/audit-events",
      filters,
      columns: [
        ["#", (e) => h("span.mono", String(e.id))],
        ["When", (e) => when(e.occurred_at)],
        ["Actor", (e) => e.actor],
        ["Action", (e) => h("strong", e.action)],
        ["Object", (e) => e.object_type === "movement_request"
          ? h("a.mono", { href: `#/movements/${e.object_id}` }, `${e.object_type} ${e.object_id.slice(0, 8)}`)
          : h("span.mono", `${e.object_type} ${e.object_id}`)],
        ["Detail", (e) => (Object.keys(e.detail).length ? h("details", h("summary", "detail"), json(e.detail)) : "")],
        ["Hash", (e) => h("span.mono.muted", { title: e.row_hash }, e.row_hash.slice(0, 12))],
      ],
    });
    mount(main, h("h1", "Audit log"), form, table);
  },
};
