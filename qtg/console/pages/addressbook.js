// The address book (docs/policies.md): active entries and proposals, with the
// cooling-off time left; admins propose and decide others' entries.

import { api } from "../api.js";
import { errorBox, field, h, mount, stateBadge, when } from "../dom.js";

const left = (e) => {
  if (e.cooling_off_left_seconds === null || e.cooling_off_left_seconds === undefined) return "—";
  if (e.cooling_off_left_seconds === 0) return "usable";
  return `${Math.ceil(e.cooling_off_left_seconds)}s left`;
};

export default {
  path: "address-book",
  title: "Address book",
  nav: true,
  async render(main, ctx) {
    const out = h("div#entry-result");
    const r = await api("GET", "/v3/address-book", { query: { limit: 200 } });
    if (!r.ok) {
      mount(main, h("h1", "Address book"), errorBox(r));
      return;
    }
    const decide = async (e, verdict) => {
      const d = await api("POST", `/v3/address-book/${e.id}/${verdict}`, { body: {} });
      if (d.ok) ctx.refresh();
      else mount(out, errorBox(d));
    };
    const rows = r.body.items.map((e) => h("tr", { dataset: { label: e.label } },
      h("td", e.label), h("td.mono", e.address), h("td", e.chain), h("td", e.asset),
      h("td", (e.tags || []).join(", ")), h("td", stateBadge(e.state)),
      h("td.cooling", left(e)), h("td", e.proposed_by), h("td", when(e.proposed_at)),
      h("td", ctx.session.may("admin") && e.state === "PROPOSED"
        ? [h("button.primary", { type: "button", onclick: () => decide(e, "approve") }, "approve"),
          h("button.danger", { type: "button", onclick: () => decide(e, "reject") }, "reject")]
        : [])));
    mount(main, h("h1", "Address book"), out,
      h("table.list#address-book",
        h("thead", h("tr", ["Label", "Address", "Chain", "Asset", "Tags", "State", "Cooling-off", "Proposed by", "Proposed", ""].map((t) => h("th", t)))),
        h("tbody", rows.length ? rows : h("tr", h("td.muted", { colspan: 10 }, "no entries")))));
    if (ctx.session.may("admin")) main.append(proposeForm(ctx));
  },
};

function proposeForm(ctx) {
  const out = h("div.out");
  const input = (name, placeholder) => h("input", { name, required: name !== "tags", placeholder });
  const inputs = {
    label: input("label", "ops wallet"),
    chain: input("chain", "1 (or a venue; * for any)"),
    asset: input("asset", "USDC"),
    address: input("address", "0x…"),
    tags: input("tags", "ops, hot (comma-separated)"),
  };
  return h("form.card.create#entry-propose", {
    onsubmit: async (ev) => {
      ev.preventDefault();
      const tags = inputs.tags.value.split(",").map((t) => t.trim()).filter(Boolean);
      const r = await api("POST", "/v3/address-book", {
        body: {
          label: inputs.label.value, chain: inputs.chain.value, asset: inputs.asset.value,
          address: inputs.address.value, tags,
        },
      });
      if (r.ok) ctx.refresh();
      else mount(out, errorBox(r));
    },
  }, h("h2", "Propose an entry"),
  h("div.row", field("Label", inputs.label), field("Chain", inputs.chain), field("Asset", inputs.asset)),
  h("div.row", field("Address", inputs.address), field("Tags", inputs.tags)),
  h("button.primary", { type: "submit" }, "Propose"), out);
}
