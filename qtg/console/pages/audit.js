// The audit log, newest first: filters and cursor paging, as the API offers them.

import { field, h, json, mount, when } from "../dom.js";
import { filterForm, filtersOf, pagedTable } from "../list.js";

const FILTERS = ["object_type", "object_id", "actor", "action"];

// Objects the console has a page for link to it.
const LINKS = {
  movement: (id) => `#/movements/${id}`,
  template: (id) => `#/templates?key=${encodeURIComponent(id)}`,
};

function objectCell(e) {
  const link = LINKS[e.object_type];
  const text = `${e.object_type} ${e.object_id}`;
  return link ? h("a.mono", { href: link(e.object_id) }, text) : h("span.mono", text);
}

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
        ["Object", (e) => objectCell(e)],
        ["Detail", (e) => (Object.keys(e.detail).length ? h("details", h("summary", "detail"), json(e.detail)) : "")],
        ["Hash", (e) => h("span.mono.muted", { title: e.row_hash }, e.row_hash.slice(0, 12))],
      ],
    });
    mount(main, h("h1", "Audit log"), form, table);
  },
};
