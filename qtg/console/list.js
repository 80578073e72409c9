// Lists: a filter form and a cursor-paged table, shared by the list pages.
// Paging is the API's own (next_cursor); the console never loads more than one
// page, so a list of 10,000 movements costs what a list of 50 does.

import { api } from "./api.js";
import { errorBox, h, mount } from "./dom.js";

// Cursors seen on the way to the current page, per list path and filters: "previous page".
const trails = new Map();

/**
 * A filter form whose fields are read into the URL (so a filtered page can be
 * reloaded or shared, with no token in it).
 */
export function filterForm(ctx, path, fields) {
  const form = h("form.filters", {
    onsubmit: (e) => {
      e.preventDefault();
      const query = {};
      for (const [name, value] of new FormData(form).entries()) if (value) query[name] = value;
      ctx.navigate(path, query);
    },
  },
  fields,
  h("button", { type: "submit" }, "Filter"),
  h("button.link", { type: "button", onclick: () => ctx.navigate(path) }, "clear"));
  return form;
}

/** Query parameters of the current page except the cursor. */
export function filtersOf(ctx, names) {
  const out = {};
  for (const n of names) {
    const v = ctx.query.get(n);
    if (v) out[n] = v;
  }
  return out;
}

/**
 * Fetch one page of `endpoint` with the current filters and cursor and draw it.
 * columns: [[heading, row => cell]]; rowProps(row) → the row's attributes.
 */
export async function pagedTable(ctx, { path, endpoint, filters, columns, rowProps, limit = 50, reread = false }) {
  const cursor = ctx.query.get("cursor");
  const r = await api("GET", endpoint, { query: { ...filters, cursor, limit } });
  if (!r.ok) return errorBox(r);
  const key = `${path}?${new URLSearchParams(filters)}`;
  let trail = trails.get(key) || [];
  if (!cursor) trail = [];
  else if (trail[trail.length - 1] !== cursor) {
    const at = trail.indexOf(cursor);
    trail = at >= 0 ? trail.slice(0, at + 1) : [...trail, cursor];
  }
  // A live re-read of a page (reread) leaves the trail alone: it may finish after
  // the person has moved on to the next page, whose trail it must not reset.
  if (!reread) trails.set(key, trail);
  const items = r.body.items || [];
  const table = h("table.list",
    h("thead", h("tr", columns.map(([title]) => h("th", title)))),
    h("tbody", items.length
      ? items.map((row) => h("tr", rowProps ? rowProps(row) : {}, columns.map(([, cell]) => h("td", cell(row)))))
      : h("tr", h("td.muted", { colspan: columns.length }, "nothing here"))));
  const previous = trail.length ? trail[trail.length - 2] : undefined;
  const pager = h("div.pager",
    h("button#page-first", {
      type: "button", disabled: cursor ? null : true, onclick: () => ctx.navigate(path, filters),
    }, "« first"),
    h("button#page-prev", {
      type: "button", disabled: cursor ? null : true,
      onclick: () => ctx.navigate(path, { ...filters, cursor: previous }),
    }, "‹ previous"),
    h("span.muted", `${items.length} shown${cursor ? ` · page ${trail.length + 1}` : ""}`),
    h("button#page-next", {
      type: "button", disabled: r.body.next_cursor ? null : true,
      onclick: () => ctx.navigate(path, { ...filters, cursor: r.body.next_cursor }),
    }, "next ›"));
  return h("div.paged", table, pager);
}

/** A page skeleton: title, optional tools, and a body filled in by `fill`. */
export async function page(main, title, ...parts) {
  mount(main, h("h1", title), ...parts);
}
